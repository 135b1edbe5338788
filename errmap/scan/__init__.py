"""Scanning: bytes -> lines -> records -> matches -> incidents.

Stage: source reads files, archives and stdin in chunks (follow keeps reading a growing file); lines peels
prefixes; prefilter and superset find candidate anchors; matcher compiles the KB's anchors; scanner streams
chunks into events; failures and readings shape lines no anchor explained; triage groups events into
incidents by run (runs); parallel spreads a scan over processes. Reads the kb package; its incidents go to
report.
"""
