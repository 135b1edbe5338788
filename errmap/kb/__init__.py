"""The knowledge base: kb/*.yaml read into runtime types, and what is derived from it.

Stage: knowledge, below every other stage. files reads a KB file with its line map; model holds the
runtime dataclasses (Entry, Anchor, Step, Link, ...); load validates through schema (pydantic, only on a
cold cache) and keeps the result through cache (the user's own folder, each file bound to its KB);
translations reads kb/zh/; stacks reads kb/stacks.yaml; datasets reads kb/datasets.yaml; gpus, predict
and versions are tables and rules the entries refer to; check is `errmap kb check`. It imports nothing
from scan, report or commands; scan compiles its anchors, report shows its entries, probes check its
conditions.
"""
