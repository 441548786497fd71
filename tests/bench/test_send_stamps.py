"""The truth server's kernel transmit timestamps (bench/send_stamps.py)."""

from __future__ import annotations

import json
import socket
import struct
import time

import pytest

from bench.accuracy import Truth, compute_errors, summarize_errors
from bench.send_stamps import (
    SCM_TSTAMP_SND,
    SO_EE_ORIGIN_TIMESTAMPING,
    SO_TIMESTAMPING_OLD,
    SendStamps,
    parse_stamp,
)
from bench.truth_server import TruthServer
from bench.workload import Workload
from loadtest.transport import KERNEL_STAMPS, StreamSession

needs_linux_stamps = pytest.mark.skipif(not KERNEL_STAMPS, reason="Linux x86_64/aarch64 only")


def _ancillary(key: int, seconds: int, nanoseconds: int, info: int = SCM_TSTAMP_SND):
    stamp = struct.pack("@llllll", seconds, nanoseconds, 0, 0, 0, 0)
    err = struct.pack("@IBBBBII", 42, SO_EE_ORIGIN_TIMESTAMPING, 0, 0, 0, info, key)
    return [(socket.SOL_SOCKET, SO_TIMESTAMPING_OLD, stamp), (socket.IPPROTO_IP, 11, err)]


def test_parse_stamp_reads_the_key_and_the_software_stamp() -> None:
    assert parse_stamp(_ancillary(109, 5, 7)) == (109, 5_000_000_007)


def test_parse_stamp_ignores_other_stamp_types_and_empty_stamps() -> None:
    assert parse_stamp(_ancillary(9, 5, 7, info=2)) is None  # SCM_TSTAMP_ACK
    assert parse_stamp(_ancillary(9, 0, 0)) is None  # no software stamp
    assert parse_stamp(_ancillary(9, 5, 7)[:1]) is None  # no extended error: no key
    assert parse_stamp([]) is None


@needs_linux_stamps
@pytest.mark.process
def test_each_send_gets_the_kernel_stamp_of_its_last_byte() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        with client, server:
            stamps = SendStamps(server)
            assert stamps.enabled
            keys, before, after = [], [], []
            for size in (10, 100, 7):
                before.append(time.perf_counter())
                server.sendall(b"x" * size)
                after.append(time.perf_counter())
                stamps.wrote(size)
                keys.append(stamps.last_key())
            assert keys == [9, 109, 116]
            found: dict[int, float] = {}
            for _ in range(50):  # on loopback they are queued during the send already
                stamps.drain(found)
                if len(found) == 3:
                    break
                time.sleep(0.001)
    assert sorted(found) == keys
    for key, start, end in zip(keys, before, after, strict=True):
        # Within the send call (the CLOCK_REALTIME mapping adds at most a few microseconds).
        assert start - 1e-4 <= found[key] <= end + 1e-4


@needs_linux_stamps
@pytest.mark.process
def test_truth_server_logs_kernel_send_times_the_errors_use(tmp_path) -> None:
    workload = Workload(
        ttft_s=0.01, gap_s=0.01, chunk_tokens=(1, 2, 3), levels=(1,), requests={1: 1}
    )
    with TruthServer(workload, tmp_path / "server.log") as server:
        with StreamSession() as session:
            body = json.dumps({"prompt": "p", "stream": True}).encode()
            response = session.post_stream(server.url + "/v1/completions", body, 5.0)
            text = b"".join(piece for _, piece in response)
        (entry,) = server.log()
    assert b" r0.w0" in text and text.endswith(b"data: [DONE]\n\n")
    kernel = entry["kernel_send_times"]
    assert kernel is not None and len(kernel) == 3 and None not in kernel
    # The kernel sent each chunk before the server's own after-write stamp.
    assert all(k <= u for k, u in zip(kernel, entry["send_times"], strict=True))
    assert kernel[-1] <= entry["kernel_done_time"] <= entry["done_time"]
    truth = Truth.from_log(entry)
    assert truth.clock == "kernel" and truth.send_times == kernel
    assert truth.end == entry["kernel_done_time"]  # E2E ends at [DONE], on the kernel's clock


def test_a_request_with_a_missing_kernel_stamp_falls_back_to_the_user_stamps() -> None:
    entry = {
        "index": 0,
        "received": 1.0,
        "send_times": [1.05, 1.07],
        "kernel_send_times": [1.049, None],
        "chunk_tokens": [1, 1],
    }
    truth = Truth.from_log(entry)
    assert truth.clock == "user" and truth.send_times == [1.05, 1.07]
    assert truth.end == 1.07  # a log without [DONE] times: the last content chunk
    assert Truth.from_log({**entry, "done_time": 1.08, "kernel_done_time": 1.075}).end == 1.08


def test_errors_report_the_truth_clock_and_how_late_user_stamps_were() -> None:
    from bench.accuracy import Observation

    kernel_entry = {
        "index": 0,
        "received": 1.0,
        "send_times": [1.052, 1.073],  # user stamps 2 ms and 3 ms late
        "kernel_send_times": [1.050, 1.070],
        "chunk_tokens": [1, 2],
    }
    user_entry = {**kernel_entry, "index": 1, "kernel_send_times": None}
    truths = [Truth.from_log(kernel_entry), Truth.from_log(user_entry)]
    observations = [
        Observation(tag=tag, start=1.0, chunk_arrivals=[1.050, 1.070], chunk_tokens=[1, 2])
        for tag in (0, 1)
    ]
    summary = summarize_errors(compute_errors(observations, truths))
    assert summary["truth_clock"] == {"kernel": 1, "user": 1}
    late = summary["truth_user_late_ms"]
    assert (
        late["n"] == 2
        and late["min"] == pytest.approx(2.0)
        and late["max_abs"] == pytest.approx(3.0)
    )
    # Against the kernel truth the instrument is exact; against the late user stamps it is not.
    assert summary["ttft_ms"]["max_abs"] == pytest.approx(2.0)


def test_a_socket_that_refuses_timestamping_gives_no_stamps_and_no_error() -> None:
    class Refusing:
        def setsockopt(self, *args: object) -> None:
            raise OSError("not supported")

        def recvmsg(self, *args: object) -> None:
            raise AssertionError("nothing is read from a socket without timestamping")

    stamps = SendStamps(Refusing())  # type: ignore[arg-type]
    assert not stamps.enabled
    found: dict[int, float] = {}
    stamps.drain(found)
    assert found == {}
