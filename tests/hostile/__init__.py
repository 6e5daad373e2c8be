"""Data for tests/test_hostile.py: hostile texts and files, all generated in code."""
