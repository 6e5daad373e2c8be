"""A randomized, seeded chaos campaign against real `companion run` processes.

    faults.py    the knobs (FAST, LONG) and the seeded source of latencies and errors
    plan.py      members, items (tagged words and files), imports, lifetimes, from a seed
    model.py     the fake model's brain (echoes tags, fails at random) and its ledger
    slack.py     Slack's Web API fake with faults; the Events API side (signed, retried)
    discord.py   Discord's REST fake with faults and history; a gateway websocket
    process.py   `companion run` generations, `companion import`, the sweep process
    sweep.py     the product's scheduled jobs, run once (a process of its own)
    checks.py    the invariants, over the fakes' records and Postgres
    campaign.py  one seed from start to verdict

tests/test_chaos.py runs one fast seed; bench/chaos.py runs many, longer.
"""
