"""The moestream-vs-llama.cpp benchmark matrix (issue #43): tools/matrix.py is its entry.

Modules: cells (what is measured), budget (VRAM budget and llama.cpp's
--n-cpu-moe from a file's layout), engines (the commands of both engines and
the parsing of their output), cache (results keyed by commits, machine, file
recipe and cell), runner (gen, runs, deadline), report (bench/results/matrix.md).
"""
