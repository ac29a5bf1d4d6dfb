#!/usr/bin/env python3
"""Where a server's CPU time goes per request, from `perf script` of a `perf record -g` run.

Usage:
  perf-parts.py samples SCRIPT_OUTPUT US_PER_REQUEST   the samples' CPU by part and by piece
  perf-parts.py syscalls TRACE_SUMMARY REQUESTS        `perf trace -s` summed by syscall name

`samples`: every sample is charged once to the part its innermost frame belongs to (the kernel,
the allocator, the Swift runtime, Swift concurrency, NIO, Hummingbird, the tracker's modules,
libpq...), which gives self time; and to each piece of the request path (RequestObserver,
the metrics counter, the key's SHA-256, EventLog...) when a frame of that piece is anywhere on
its stack, which gives inclusive time (async functions resume from the executor, so their time
is only what runs between two suspensions). Shares are turned into µs per request with the
CPU time per request measured without perf. Symbols are demangled with `swift demangle`.
Standard library only.
"""
import re
import subprocess
import sys
from collections import Counter, defaultdict

# Parts, by the innermost frame: first by shared object, then (in the executable) by the Swift
# module of the mangled symbol or by a C symbol's prefix.
RUNTIME_DSOS = {"libswiftCore.so": "Swift runtime (retain/release, metadata, casts, hashing)",
                "libswiftSynchronization.so": "Swift runtime (retain/release, metadata, casts, hashing)",
                "libswift_Concurrency.so": "Swift concurrency and dispatch (tasks, executors, job queues)",
                "libdispatch.so": "Swift concurrency and dispatch (tasks, executors, job queues)",
                "libBlocksRuntime.so": "Swift concurrency and dispatch (tasks, executors, job queues)"}
ALLOCATOR = re.compile(r"^(__libc_)?(malloc|free|cfree|calloc|realloc|_int_malloc|_int_free|_int_realloc|malloc_consolidate|"
                       r"unlink_chunk|tcache_\w+|arena_get2|__default_morecore|sysmalloc|alloc_perturb|_mid_memalign|"
                       r"posix_memalign|aligned_alloc|malloc_usable_size|__malloc_\w+)\b")
MODULE_PARTS = [
    (r"NIO\w*|_NIO\w*|CNIO\w*|Atomics|_AtomicsShims|DequeModule|InternalCollectionsUtilities", "NIO (channel pipeline, HTTP/1 codec, async channel)"),
    (r"Hummingbird\w*|HTTPTypes", "Hummingbird and HTTPTypes (router, request/response, fields)"),
    (r"TrackerServer", "TrackerServer (middleware, handlers, routes)"),
    (r"Tracker|TrackerInput|TrackerModel", "Tracker, TrackerInput, TrackerModel (domain, decoding, event log)"),
    (r"TrackerPostgres", "TrackerPostgres (pool, libpq wrapper)"),
    (r"Crypto|_CryptoExtras|CCryptoBoringSSL\w*", "swift-crypto (SHA-256 of keys)"),
    (r"Metrics|CoreMetrics|Prometheus", "swift-metrics and Prometheus"),
    (r"Logging", "swift-log"),
]
C_PREFIXES = [("c_nio_", "NIO (channel pipeline, HTTP/1 codec, async channel)"),
              ("CNIO", "NIO (channel pipeline, HTTP/1 codec, async channel)"),
              ("CCryptoBoringSSL", "swift-crypto (SHA-256 of keys)")]

# Pieces of the request path, charged when any frame on the stack matches. The names are
# `swift demangle --simplified`'s, which drop module names, so a pattern names the type.
PIECES = [
    ("HTTP/1 parsing (llhttp, HTTPDecoder, ByteToMessageHandler)", r"llhttp|\bHTTPDecoder\b|ByteToMessageHandler"),
    ("HTTP/1 response encoding (HTTPResponseEncoder)", r"HTTPResponseEncoder|HTTPServerResponseEncoder"),
    ("NIOHTTPTypes conversions (HTTP1ToHTTPServerCodec)", r"HTTP1ToHTTPServerCodec"),
    ("NIO async channel and writer (to and from the connection's task)", r"NIOAsyncChannel|NIOAsyncWriter|NIOAsyncSequenceProducer|NIOAsyncChannelHandler|NIOAsyncChannelInbound|NIOAsyncChannelOutbound"),
    ("NIO socket reads and writes (syscalls included)", r"BaseStreamSocketChannel\.readFromSocket|PendingStreamWritesManager|BaseSocketChannel\.flush|BaseStreamSocketChannel\.writeToSocket"),
    ("NIO event loop: wakeups from other threads (eventfd)", r"SelectableEventLoop\.(wakeup|_schedule|enqueue|execute)|Selector\.wakeup"),
    ("Hummingbird connection task and responder (HTTPChannelHandler, Router)", r"\bHTTPChannelHandler\b|\bHTTP1Channel\b|\bRouter\b|RouterResponder|\bApplication\b"),
    ("Hummingbird request context and logger (request id, Logger metadata)", r"RequestContext|\bLogger\b|RequestID"),
    ("ConnectionGuard and HTTP1Corners", r"\b(ConnectionGuard|HTTP1Corners)\."),
    ("QuickAnswers", r"\bQuickAnswers\."),
    ("RequestObserver (all of it)", r"\bRequestObserver\b"),
    ("HTTPMetrics.count (Mutex, dictionary, counter)", r"\bHTTPMetrics\."),
    ("swift-metrics/Prometheus counters and recorders", r"Prometheus|CoreMetrics"),
    ("ErrorBodyMiddleware", r"ErrorBodyMiddleware"),
    ("MethodNotAllowedMiddleware", r"MethodNotAllowedMiddleware"),
    ("RateLimiter", r"\bRateLimiter\."),
    ("IngestRoute (all of it, between suspensions)", r"\bIngestRoute\b"),
    ("IngestRoute.batchHead (request fields)", r"IngestRoute\.batchHead"),
    ("the key: APIKeys, its SHA-256", r"\bAPIKeys\.|KeyDigest|SHA256|CCryptoBoringSSL"),
    ("BatchDecoder (decoding, validation)", r"BatchDecoder"),
    ("ClientIdentity (client address, user agent)", r"ClientIdentity"),
    ("IngestMetrics", r"IngestMetrics"),
    ("the receipt (body, Response)", r"IngestRoute\.receipt"),
    ("EventLog (append, state machine, writers, SQL)", r"\bEventLog\b|EventLogStateMachine|AppendBatch|UserAgentNumbers"),
    ("libpq and the pool's threads", r"^(PQ|pq)\w+|\bConnectionPool\b|NIOThreadPool"),
    ("the projector", r"\bProjector\b|\bProjection\b|Contribution|LogCursor"),
    ("Swift concurrency: running jobs (swift_job_run)", r"swift_job_run"),
    ("Swift concurrency: enqueueing jobs and resuming continuations", r"^(swift_task_enqueue\w*|swift_continuation_\w+|swift_task_switch|swift_task_create\w*|_dispatch_root_queue_poke\w*|dispatch_async_f?|_dispatch_continuation_async\w*|_swift_task_enqueueOnExecutor\w*)$"),
    ("memory allocation and release (malloc/free)", r"^(__libc_)?(malloc|free|cfree|_int_malloc|_int_free|calloc|realloc)$"),
    ("retain/release", r"swift_retain|swift_release|swift_bridgeObjectRetain|swift_bridgeObjectRelease"),
    ("generic metadata and dynamic casts", r"swift_getGenericMetadata|_swift_getGenericMetadata|swift_dynamicCast|tryCast|swift_conformsToProtocol|getGenericMetadata"),
    ("kernel: TCP on loopback (send, receive)", r"tcp_sendmsg|tcp_recvmsg|tcp_v4_rcv|__tcp_transmit_skb|ip_finish_output|loopback_xmit|net_rx_action"),
    ("kernel: futex (locks, condition waits, wakeups)", r"futex_"),
    ("kernel: epoll", r"ep_poll|do_epoll_wait|ep_send_events|epoll_ctl"),
    ("kernel: eventfd", r"eventfd_"),
    ("kernel: scheduler (switching, waking threads)", r"__schedule|schedule\b|try_to_wake_up|finish_task_switch"),
]

SAMPLE_HEAD = re.compile(r"^(\S.*?)\s+(\d+)\s+[\d.]+:\s+\d+\s+\S+")
FRAME = re.compile(r"^\s+[0-9a-f]+\s+(.+?)\s+\((.*)\)$")


def thread_class(comm):
    if comm.startswith("NIO-"):
        return "event loops (NIO-*)"
    if "qos" in comm:
        return "Swift concurrency pool (dispatch)"
    if comm.startswith("TP-"):
        return "NIOThreadPool (libpq calls)"
    return "other threads"


def strip_offset(symbol):
    return re.sub(r"\+0x[0-9a-f]+$", "", symbol)


def demangle(symbols):
    mangled = sorted({s for s in symbols if s.startswith("$s")})
    if not mangled:
        return {}
    out = subprocess.run(["swift", "demangle", "--simplified", "--compact"], input="\n".join(mangled) + "\n",
                         capture_output=True, text=True, check=True).stdout.split("\n")
    return dict(zip(mangled, out))


def swift_module(symbol):
    m = re.match(r"^\$s(\d+)([A-Za-z_]\w*)", symbol)
    if m:
        return m.group(2)[:int(m.group(1))]
    if re.match(r"^\$s[sS]", symbol):
        return "Swift"
    return None


def part_of(symbol, dso):
    base = dso.rsplit("/", 1)[-1]
    if base == "[kernel.kallsyms]" or dso.startswith("[kernel"):
        return "kernel"
    if base.startswith("libc.so") or base.startswith("ld-linux"):
        return "glibc malloc/free" if ALLOCATOR.match(symbol) else "glibc (memcpy, locks, syscall wrappers)"
    for prefix, part in RUNTIME_DSOS.items():
        if base.startswith(prefix):
            return part
    if base.startswith("libpq") or base.startswith("libssl") or base.startswith("libcrypto"):
        return "libpq"
    if base.startswith("libFoundation"):
        return "Foundation"
    for prefix, part in C_PREFIXES:
        if symbol.startswith(prefix):
            return part
    module = swift_module(symbol)
    if module == "Swift":
        return "Swift standard library (specialized generics)"
    if module:
        for pattern, part in MODULE_PARTS:
            if re.fullmatch(pattern, module):
                return part
        return "other Swift modules (" + module + ")"
    return "other (" + base + ")"


def read_samples(path):
    samples = []
    comm, frames = None, []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            head = SAMPLE_HEAD.match(line)
            if head:
                if comm is not None:
                    samples.append((comm, frames))
                comm, frames = head.group(1), []
                continue
            frame = FRAME.match(line)
            if frame and comm is not None:
                frames.append((strip_offset(frame.group(1)), frame.group(2)))
    if comm is not None:
        samples.append((comm, frames))
    return samples


def samples_report(path, us_per_request):
    samples = read_samples(path)
    total = len(samples)
    if total == 0:
        sys.exit(f"no samples in {path}")
    names = demangle({sym for _, frames in samples for sym, _ in frames})
    parts, threads, pieces, leaves = Counter(), Counter(), Counter(), Counter()
    for comm, frames in samples:
        threads[thread_class(comm)] += 1
        if not frames:
            parts["unknown"] += 1
            continue
        leaf, dso = frames[0]
        parts[part_of(leaf, dso)] += 1
        leaves[(names.get(leaf, leaf), dso.rsplit("/", 1)[-1])] += 1
        stack = [names.get(sym, sym) for sym, _ in frames]
        for piece, pattern in PIECES:
            if any(re.search(pattern, name) for name in stack):
                pieces[piece] += 1

    def table(title, counter):
        print(f"{title}: % of samples, µs per request")
        for name, n in counter.most_common():
            print(f"  {100 * n / total:5.1f} % {us_per_request * n / total:7.1f} µs  {name}")

    print(f"{total} samples; {us_per_request:.1f} µs of CPU per request (measured without perf)")
    table("by thread", threads)
    table("by part (self time: the innermost frame)", parts)
    table("by piece of the request path (inclusive: any frame on the stack; pieces overlap)", pieces)
    print("top 30 symbols (self time)")
    for (name, dso), n in leaves.most_common(30):
        print(f"  {100 * n / total:5.1f} % {us_per_request * n / total:6.1f} µs  {name[:150]}  [{dso}]")


def syscalls_report(path, requests):
    calls = Counter()
    by_thread = defaultdict(int)
    current = None
    with open(path, errors="replace") as f:
        for line in f:
            thread = re.match(r"^\s*(\S.*?) \((\d+)\), \d+ events", line)
            if thread:
                current = thread_class(thread.group(1))
                continue
            row = re.match(r"^\s+([a-z_0-9]+)\s+(\d+)\s+\d+\s+[\d.]+", line)
            if row and current:
                calls[row.group(1)] += int(row.group(2))
                by_thread[current] += int(row.group(2))
    total = sum(calls.values())
    print(f"syscalls per request: {total / requests:.2f} ({total} over {requests} requests)")
    for name, n in calls.most_common(15):
        print(f"  {n / requests:6.2f}  {name}")
    print("by thread:")
    for name, n in sorted(by_thread.items(), key=lambda kv: -kv[1]):
        print(f"  {n / requests:6.2f}  {name}")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("samples", "syscalls"):
        sys.exit(__doc__)
    if sys.argv[1] == "samples":
        samples_report(sys.argv[2], float(sys.argv[3]))
    else:
        syscalls_report(sys.argv[2], int(sys.argv[3]))
