"""The kernel's transmit time of each chunk the truth server sends (Linux ``SO_TIMESTAMPING``).

Why: the truth server stamped each chunk with ``perf_counter`` after ``sendall`` returned.
With 256 streams in one Python process, that thread must first win the GIL back (and the
CPU, on 2 busy cores), so the stamp could be tens of milliseconds after the bytes left
(bench TTFT errors down to -25 ms: the client's kernel receive stamp *before* the server's
send stamp). The kernel stamps the moment the segment is handed to the device instead;
on loopback that is the same moment the receiver's ``SO_TIMESTAMPNS`` records.

Kernel interface (Linux ``Documentation/networking/timestamping.rst``; uapi headers
``include/uapi/asm-generic/socket.h``, ``include/uapi/linux/net_tstamp.h``,
``include/uapi/linux/errqueue.h``; TCP support is commit 4ed2d765dfac "net-timestamp: TCP
timestamping"): ``SO_TIMESTAMPING`` with TX_SOFTWARE | SOFTWARE | OPT_ID | OPT_TSONLY asks
for a software timestamp of the *last byte of every send*; it comes back on the socket's
error queue (``recvmsg(MSG_ERRQUEUE)``) as an ``SCM_TIMESTAMPING`` message (three
timespecs, CLOCK_REALTIME, the software one first) plus a ``sock_extended_err`` whose
``ee_data`` is that byte's offset in the stream (counted from when the option was set).
"""

from __future__ import annotations

import socket
import struct
import time

from loadtest.transport import KERNEL_STAMPS

# include/uapi/asm-generic/socket.h (x86_64, aarch64): SO_TIMESTAMPING_OLD 37, and
# SCM_TIMESTAMPING_OLD == SO_TIMESTAMPING_OLD.
SO_TIMESTAMPING_OLD = 37
# include/uapi/linux/net_tstamp.h
SOF_TIMESTAMPING_TX_SOFTWARE = 1 << 1
SOF_TIMESTAMPING_SOFTWARE = 1 << 4
SOF_TIMESTAMPING_OPT_ID = 1 << 7
SOF_TIMESTAMPING_OPT_TSONLY = 1 << 11  # no copy of the packet with each stamp
TX_FLAGS = (
    SOF_TIMESTAMPING_TX_SOFTWARE
    | SOF_TIMESTAMPING_SOFTWARE
    | SOF_TIMESTAMPING_OPT_ID
    | SOF_TIMESTAMPING_OPT_TSONLY
)
# include/uapi/linux/errqueue.h: struct sock_extended_err {u32 ee_errno; u8 ee_origin,
# ee_type, ee_code, ee_pad; u32 ee_info; u32 ee_data}; origin 4 = SO_EE_ORIGIN_TIMESTAMPING,
# ee_info 0 = SCM_TSTAMP_SND (the device-send stamp; 1 would be SCHED, 2 ACK).
_EXTENDED_ERR = struct.Struct("@IBBBBII")
SO_EE_ORIGIN_TIMESTAMPING = 4
SCM_TSTAMP_SND = 0
_RECVERR = {(socket.IPPROTO_IP, 11), (socket.IPPROTO_IPV6, 25)}  # IP_RECVERR, IPV6_RECVERR
_TIMESPEC = struct.Struct("@ll")
_ANCILLARY_SIZE = 512
_KEY_MASK = 0xFFFFFFFF  # ee_data is a u32 that wraps


def parse_stamp(ancillary: list[tuple[int, int, bytes]]) -> tuple[int, int] | None:
    """(byte key, CLOCK_REALTIME ns) of one error-queue message, or None when it is not a
    software send timestamp (another origin or stamp type, or a zero software stamp)."""
    wall_ns: int | None = None
    key: int | None = None
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPING_OLD:
            if len(data) >= _TIMESPEC.size:
                seconds, nanoseconds = _TIMESPEC.unpack_from(data, 0)
                wall_ns = seconds * 1_000_000_000 + nanoseconds
        elif (level, kind) in _RECVERR and len(data) >= _EXTENDED_ERR.size:
            _, origin, _, _, _, info, ee_data = _EXTENDED_ERR.unpack_from(data, 0)
            if origin == SO_EE_ORIGIN_TIMESTAMPING and info == SCM_TSTAMP_SND:
                key = ee_data
    if key is None or not wall_ns:
        return None
    return key, wall_ns


class SendStamps:
    """One connection's send timestamps: count every byte written, then collect the kernel's
    stamp for the sends whose keys were noted."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._written = 0
        self.enabled = False
        if KERNEL_STAMPS:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING_OLD, TX_FLAGS)
                self.enabled = True
            except OSError:
                pass

    def wrote(self, nbytes: int) -> None:
        self._written += nbytes

    def last_key(self) -> int:
        """The key the kernel will report for the send that wrote the last byte so far."""
        return (self._written - 1) & _KEY_MASK

    def drain(self, found: dict[int, float]) -> None:
        """Move every stamp queued so far into ``found`` (key -> the kernel's send time on
        ``perf_counter``); never blocks. A stamp can lag its send (the caller may retry)."""
        if not self.enabled:
            return
        while (message := self._next()) is not None:
            key, wall_ns = message
            if key >= 0:
                # CLOCK_REALTIME -> perf_counter at this moment (as the client maps its
                # receive stamps), so both sides share one mapping method.
                now, now_wall = time.perf_counter(), time.time_ns()
                found[key] = now - (now_wall - wall_ns) / 1e9

    def _next(self) -> tuple[int, int] | None:
        """One parsed stamp, (-1, 0) for an unrelated message, None when the queue is empty."""
        try:
            _, ancillary, _, _ = self._sock.recvmsg(
                0, _ANCILLARY_SIZE, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT
            )
        except OSError:  # BlockingIOError: the queue is empty; anything else: nothing to read
            return None
        return parse_stamp(ancillary) or (-1, 0)
