"""The primitives the native passes and stages recognize by identity (``e.prim is SCAN``), imported
from where they are declared: a renamed or removed primitive is an import error here, never a
pattern that silently stops matching (which a comparison with ``prim.name`` would be)."""

from __future__ import annotations

from ember._src.control_flow.cond import cond_p as COND
from ember._src.control_flow.loops import while_p as WHILE
from ember._src.control_flow.scan import scan_p as SCAN
from ember._src.prims.dot import dot_general_p as DOT_GENERAL
from ember._src.prims.elementwise import add_p as ADD
from ember._src.prims.elementwise import and_p as AND
from ember._src.prims.elementwise import convert_element_type_p as CONVERT_ELEMENT_TYPE
from ember._src.prims.elementwise import div_p as DIV
from ember._src.prims.elementwise import eq_p as EQ
from ember._src.prims.elementwise import exp_p as EXP
from ember._src.prims.elementwise import mul_p as MUL
from ember._src.prims.elementwise import neg_p as NEG
from ember._src.prims.elementwise import select_n_p as SELECT_N
from ember._src.prims.elementwise import shift_left_p as SHIFT_LEFT
from ember._src.prims.elementwise import sub_p as SUB
from ember._src.prims.indexing import take_p as TAKE
from ember._src.prims.movement import broadcast_in_dim_p as BROADCAST_IN_DIM
from ember._src.prims.movement import iota_p as IOTA
from ember._src.prims.movement import reshape_p as RESHAPE
from ember._src.prims.movement import transpose_p as TRANSPOSE
from ember._src.prims.random_bits import bitcast_convert_type_p as BITCAST_CONVERT_TYPE
from ember._src.prims.random_bits import threefry2x32_p as THREEFRY2X32
from ember._src.prims.reductions import reduce_max_p as REDUCE_MAX
from ember._src.prims.reductions import reduce_sum_p as REDUCE_SUM

LOOPS = (SCAN, WHILE, COND)

__all__ = ["ADD", "AND", "BITCAST_CONVERT_TYPE", "BROADCAST_IN_DIM", "COND", "CONVERT_ELEMENT_TYPE", "DIV",
           "DOT_GENERAL", "EQ", "EXP", "IOTA", "LOOPS", "MUL", "NEG", "REDUCE_MAX", "REDUCE_SUM", "RESHAPE",
           "SCAN", "SELECT_N", "SHIFT_LEFT", "SUB", "TAKE", "THREEFRY2X32", "TRANSPOSE", "WHILE"]
