"""The intrinsic a native run's generated function is made of (:mod:`dml_numba.cpu._native`);
imported by that generated code only.

``run_calls(addrs, ptrs, clock, budget_ns, spec)``: the Numba-compiled functions at
``addrs[0]``, ``addrs[1]``, ... called in order, in Numba's own calling convention (each
one's status checked: an exception one raises is raised by the caller, the calls after it not
made), until ``budget_ns`` nanoseconds have passed on the C library's ``clock_gettime(clock)``
since the first (checked before each call after the first: the calls made, returned, are
the run so far; the caller makes the others its own way), on the arguments
``spec`` lists per call (a string literal: the ``repr`` of a tuple, one tuple of arguments a
call): ``("a", slot, dtype, shape)``, the C-contiguous array of ``dtype`` and ``shape``
whose data starts at ``ptrs[slot]``, owned by nobody (no meminfo: what ``numba.carray``
makes); ``("s", type, value)``, a scalar. An array passes as the struct every array of its
dtype and rank is (read-only and layout flags change no member), so a kernel compiled for a
model's read-only weights takes it as it is.

All of it is emitted straight as LLVM: written as Numba code (``numba.carray`` and a call
site a step), MobileNetV2's fifty steps took 8 s to compile, most of it Numba's typing and
lowering of some 4,000 statements.
"""
from __future__ import annotations

import ast

from numba.core import cgutils, types
from numba.extending import intrinsic


def _types(spec: str):
    """Each call's argument types, from ``spec``."""
    import numpy as np
    from numba import from_dtype

    calls = ast.literal_eval(spec)
    out = []
    for args in calls:
        tys = []
        for arg in args:
            if arg[0] == "a":
                tys.append(types.Array(from_dtype(np.dtype(arg[2])), len(arg[3]), "C"))
            else:
                tys.append(getattr(types, arg[1]))
        out.append(tuple(tys))
    return calls, out


def _now_ns(builder, clock):
    """``clock_gettime(clock)`` in nanoseconds (an i64)."""
    from llvmlite import ir

    i32, i64 = ir.IntType(32), ir.IntType(64)
    spec_ty = ir.LiteralStructType([i64, i64])  # struct timespec: tv_sec, tv_nsec (64-bit)
    fnty = ir.FunctionType(i32, [i32, spec_ty.as_pointer()])
    fn = cgutils.get_or_insert_function(builder.module, fnty, "clock_gettime")
    ts = cgutils.alloca_once(builder, spec_ty)
    builder.call(fn, [builder.trunc(clock, i32), ts])
    sec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 0))
    nsec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 1))
    return builder.add(builder.mul(sec, i64(1_000_000_000)), nsec)


@intrinsic(prefer_literal=True)
def run_calls(typingctx, addrs, ptrs, clock, budget_ns, spec):
    if not (isinstance(spec, types.StringLiteral) and isinstance(addrs, types.Array)
            and isinstance(ptrs, types.Array) and isinstance(clock, types.Integer)
            and isinstance(budget_ns, types.Integer)):
        return None
    calls, argtys = _types(spec.literal_value)

    def codegen(context, builder, signature, args):
        conv = context.call_conv
        intp = context.get_value_type(types.intp)
        i64 = context.get_value_type(types.int64)
        clock_v = context.cast(builder, args[2], signature.args[2], types.int64)
        budget = context.cast(builder, args[3], signature.args[3], types.int64)
        done = cgutils.alloca_once_value(builder, i64(len(calls)))
        exit_block = builder.append_basic_block("calls.done")
        start = _now_ns(builder, clock_v)
        addr_ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr_ary = context.make_array(signature.args[1])(context, builder, args[1])

        def item(ary, i):
            return builder.load(builder.gep(ary.data, [intp(i)]))

        from numba.np.arrayobj import populate_array

        for k, (call, tys) in enumerate(zip(calls, argtys)):
            if k:  # past the budget: the calls made so far
                late = builder.icmp_signed(">=", builder.sub(_now_ns(builder, clock_v), start),
                                           budget)
                with builder.if_then(late, likely=False):
                    builder.store(i64(k), done)
                    builder.branch(exit_block)
            values = []
            for arg, ty in zip(call, tys):
                if arg[0] == "s":
                    values.append(context.get_constant(ty, arg[2]))
                    continue
                ary = context.make_array(ty)(context, builder)
                itemsize = context.get_abi_sizeof(context.get_data_type(ty.dtype))
                shape = [intp(n) for n in arg[3]]
                strides, step = [], itemsize
                for n in reversed(arg[3]):  # C order
                    strides.insert(0, intp(step))
                    step *= n
                data = builder.inttoptr(item(ptr_ary, arg[1]), ary.data.type)
                populate_array(ary, data=data, shape=shape, strides=strides,
                               itemsize=intp(itemsize), meminfo=None)
                values.append(ary._getvalue())
            fnty = conv.get_function_type(types.none, tys)
            fnptr = builder.inttoptr(item(addr_ary, k), fnty.as_pointer())
            retty = conv.get_return_type(types.none).pointee
            retval = cgutils.alloca_once(builder, retty)
            builder.store(cgutils.get_null_value(retty), retval)
            excinfo = cgutils.alloca_once(builder, fnty.args[1].pointee, name="excinfo")
            packed = list(conv._get_arg_packer(tys).as_arguments(builder, values))
            code = builder.call(fnptr, [retval, excinfo] + packed)
            status = conv._get_return_status(builder, code, builder.load(excinfo))
            with builder.if_then(status.is_error, likely=False):
                conv.return_status_propagate(builder, status)
        builder.branch(exit_block)
        builder.position_at_end(exit_block)
        return builder.load(done)

    return types.int64(addrs, ptrs, clock, budget_ns, spec), codegen
