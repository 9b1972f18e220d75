"""Traces: the captured (or synthesized) gradient tensors every simulation starts from."""
from sim.traces.format import Trace, TraceWriter, TensorRecord, open_trace, verify_record

__all__ = ["Trace", "TraceWriter", "TensorRecord", "open_trace", "verify_record"]
