"""The composition root and front ends: settings, database lifecycle, CLI, terminal chat."""
