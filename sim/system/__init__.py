"""System level: clusters, collectives, the SimPy iteration timeline, memory, PruneTrain epochs, TTA.

Per-layer FWD/AGBP/WGC seconds (from the engines, or a labeled roofline fallback) become one training
iteration on many devices (sim.system.timeline), then whole runs epoch by epoch
(sim.system.prunetrain) and time-to-accuracy (sim.system.tta). See docs/explanation/system.md.
"""
