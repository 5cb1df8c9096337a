"""Progress logs as JSON lines: appended by ranks, read whole or tailed by a launcher."""

from __future__ import annotations

from labkit.runtime.runlog import LogTail, append_record, read_records


def test_records_round_trip_and_a_cut_line_is_skipped(tmp_path):
    log = tmp_path / "progress.jsonl"
    assert read_records(log) == []
    append_record(log, {"step": 1})
    append_record(log, {"event": "start", "world": 2})
    with open(log, "a") as out:
        out.write('{"step": 2, "lo')  # a rank killed mid-write
    assert read_records(log) == [{"step": 1}, {"event": "start", "world": 2}]


def test_a_tail_returns_each_record_once_and_waits_for_whole_lines(tmp_path):
    log = tmp_path / "progress.jsonl"
    tail = LogTail(log)
    assert tail.new_records() == []  # no file yet
    append_record(log, {"step": 1})
    assert tail.new_records() == [{"step": 1}]
    assert tail.new_records() == []
    with open(log, "a") as out:
        out.write('{"step": 2, "note": "é')  # half a line, being written
    assert tail.new_records() == []
    with open(log, "a") as out:
        out.write('"}\n')
    append_record(log, {"step": 3})
    assert tail.new_records() == [{"step": 2, "note": "é"}, {"step": 3}]
