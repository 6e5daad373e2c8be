"""A randomized, seeded chaos campaign against real `companion run` processes.

    faults.py       the knobs (FAST, LONG, CALM) and the seeded source of delays and errors
    plan.py         members, items (tagged words and files), scenes, imports, lifetimes
    model.py        the fake model's brain (echoes tags, fails at random) and its ledger
    slack_api.py    Slack's Web API fake with faults; the Events API side (signed, retried)
    discord_api.py  Discord's REST fake with faults and history; a gateway websocket
    process.py      `companion run` generations, `companion import`, the sweep process
    sweep.py        the product's scheduled jobs, run once (a process of its own)
    checks.py       the invariants, over the fakes' records and Postgres
    report.py       the verdict: violations, counts, timeline, errors the processes logged
    campaign.py     one seed from start to verdict

tests/test_chaos.py runs one fast seed; bench/chaos.py runs many, longer.
"""
