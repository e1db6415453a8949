"""Exporting trained policies to other runtimes.

Responsibility: re-export `export_onnx` and its helpers (see ``onnx_export.py``).
Must not: train, or read checkpoints (the CLI's ``export`` command does).
"""

from sampleforge.export.onnx_export import (
    ContinuousPolicyStep,
    OnnxExport,
    PolicyStep,
    QPolicyStep,
    acting_step,
    example_inputs,
    export_onnx,
)

__all__ = [
    "ContinuousPolicyStep",
    "OnnxExport",
    "PolicyStep",
    "QPolicyStep",
    "acting_step",
    "example_inputs",
    "export_onnx",
]
