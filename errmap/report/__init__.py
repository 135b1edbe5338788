"""Reporting: incidents -> diagnoses -> what the user reads.

Stage: contract builds the Report and its diagnoses (the JSON contract); text prints them on a terminal
(layout wraps, i18n translates); inert keeps every line inert for CI runners and terminals; save writes
--report files whole; one module per machine format. Reads scan's incidents and the kb's
entries; commands call it.
"""
