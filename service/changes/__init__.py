"""The changefeed: the log read in order with nothing skipped (``reader``), each event told as
a change (``records``), filtered to what a caller may see (``filters``), fanned out to
streams with bounded buffers (``hub``), encoded as Server-Sent Events (``sse``) and as
Triton's changefeed (``triton``). docs/api.md, "Changes"."""
