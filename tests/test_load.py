"""Load while a run trains (loopback only; bounded: 6,000 requests, then 200 streams, 60 s each).

The read API must answer every request (no errors) at an offered 100 requests/s, and 200
clients following the run's event stream must each get every event once, in order.

Why 100/s and not the issue's 200/s: on a 2-core machine (CI's) one core trains and the app
shares the other with this client; the app needs 2.5-6 ms of CPU per read request, so 200/s is
past what that core can serve and the backlog outgrows any client timeout (BENCHMARKS.md has
both rates, measured by `python -m benchmarks.run --only load`). The latencies are printed here,
not asserted: a shared CI machine's timing decides nothing.

Slow (about 4 minutes): `make test-slow` runs it, and CI does.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from benchmarks.bench_load import (
    all_event_ids,
    many_streams,
    open_loop,
    read_paths,
    stream_check,
    training_site,
)

pytestmark = pytest.mark.slow


def test_read_api_at_100_per_second_and_200_streams_while_a_run_trains():
    with training_site(streams_allowed=210) as (app, run_id):
        api = asyncio.run(open_loop(app.url, read_paths(run_id), rate=100, seconds=60))
        print(json.dumps(api))
        assert api["errors"] == 0, api["error_examples"]
        assert api["requests"] == 6_000 and api["achieved_per_sec"] > 95
        received, cuts = asyncio.run(many_streams(f"{app.url}/api/runs/{run_id}/events", clients=200, seconds=60))
        expected = all_event_ids(app, run_id, until=max(max(ids) for ids in received))
        streams = stream_check(received, expected)
        print(json.dumps({**streams, "reconnects": cuts}))  # cut connections, resumed with Last-Event-ID
        assert streams["clients"] == 200 and streams["events_min"] > 50  # history plus a minute of live events
        assert streams["clients_with_dropped"] == streams["clients_with_duplicates"] == 0
        assert streams["clients_out_of_order"] == 0
