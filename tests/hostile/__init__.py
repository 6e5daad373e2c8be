"""Hostile input at every entry point: the corpus (corpus.py: texts, files.py: files, all
generated in code), what every case checks (common.py), and one test module per entry point:
messages and model replies, uploads, commands, and garbage from the model endpoint."""
