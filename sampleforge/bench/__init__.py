"""Throughput measurement: pure simulation, compute limit and training FPS (`sampleforge bench`)."""
