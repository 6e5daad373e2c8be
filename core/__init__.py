"""Companion's core: the MemGPT memory engine.

Nothing in here knows about Discord, Slack or the terminal. Adapters hand events in
(`core.events`), the engine (`core.runtime.engine`) runs one agent turn at a time per member, and
replies come back out through the outbox.
"""
