"""The commands: cli parses options and dispatches to scan, explain, doctor, docs, run, scan --ray
and kb new (draft).

Stage: the top; each command wires kb, scan, report and probes together, and nothing below imports it.
"""
