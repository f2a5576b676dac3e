#!/usr/bin/env python3
"""The peer of the profile-reader benchmark: HTA's own load of a trace folder
(hta.trace_analysis.TraceAnalysis parses every trace in it into its pandas tables), timed
in this process, with the peak resident memory of this process and of its children (HTA
parses ranks in a process pool). Prints one JSON line.

    hta_load.py TRACE_DIR
"""
import json
import resource
import sys
import time


def main():
    trace_dir = sys.argv[1]
    start = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis  # noqa: E402 (the import is part of the load)

    analysis = TraceAnalysis(trace_dir=trace_dir)
    seconds = time.perf_counter() - start
    trace = analysis.t.get_trace(0)
    usage_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    usage_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(json.dumps({"seconds": seconds, "events": int(len(trace)), "peak_rss_self": usage_self,
                      "peak_rss_children": usage_children}))


if __name__ == "__main__":
    main()
