"""The machine record every local run and miniature benchmark carries."""

from __future__ import annotations

from pathlib import Path

import pytest

from local_run import machine


@pytest.mark.process
def test_cpu_model_is_read_from_cpuinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t: avx2\n")
    monkeypatch.setattr(machine, "CPUINFO", cpuinfo)
    assert machine.cpu_model() == "AMD EPYC 9R14"
    monkeypatch.setattr(machine, "CPUINFO", tmp_path / "missing")
    assert machine.cpu_model()  # falls back to what platform knows, never empty


def test_record_holds_the_load_at_start_and_end(monkeypatch: pytest.MonkeyPatch) -> None:
    loads = iter([[0.1, 0.2, 0.3], [4.11, 2.0, 1.0]])
    monkeypatch.setattr(machine, "load_average", lambda: next(loads))
    monkeypatch.setattr(machine, "cpu_model", lambda: "CPU X")
    monkeypatch.setattr(machine, "memory_bandwidth_gbs", lambda: None)
    record = machine.Machine.at_start()
    assert record.cores >= 1 and record.load_average_end is None
    assert record.text() == f"CPU X, {record.cores} cores; load average 0.10 at the start"
    record.finish()
    assert record.text().endswith("0.10 at the start, 4.11 at the end")


def test_memory_bandwidth_is_measured_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "BANDWIDTH_BYTES", 32 * 2**20)  # still past the L2
    measured = machine.memory_bandwidth_gbs()
    # Any host that runs the miniature moves between 1 and 1000 GB/s through one core.
    assert 1 < measured < 1000
    monkeypatch.setattr(machine, "memory_bandwidth_gbs", lambda: 12.34)
    record = machine.Machine.at_start()
    assert record.memory_bandwidth_gbs == 12.34
    assert "memory bandwidth 12.3 GB/s" in record.text()
