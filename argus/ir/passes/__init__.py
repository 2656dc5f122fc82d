"""The pass pipeline, in order. Each pass takes and returns an IR kernel."""

from argus.ir.passes.hoist import hoist_mmas
from argus.ir.passes.layouts import assign_layouts
from argus.ir.passes.pipeline import expand_pipelines
from argus.ir.passes.stage_operands import stage_mma_operands

PIPELINE = [
    hoist_mmas,  # an mma inside a larger expression becomes its own tile (its fragment layout is named)
    stage_mma_operands,  # a register B operand is stored to a shared buffer between two barriers; inline A named
    expand_pipelines,  # pipeline(stages=S) -> prologue / steady state / epilogue with commit/wait/barrier
    assign_layouts,  # mma fragment layouts (warp grid, instruction shape) checked against the tile
]
