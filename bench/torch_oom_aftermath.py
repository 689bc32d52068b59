"""What a caught out-of-memory error keeps alive, shown with torch on the CPU (chapter 14).

A failed allocation raises an exception whose traceback holds the frames of the functions it
went through, and so their local variables: the tensors the failing step had already made. Each
case below makes a 4 MiB tensor in such a frame, lets an allocation fail after it, and says, with
a weak reference, whether the tensor is still alive.

Run with torch 2.15.0 (any machine, no GPU):  python bench/torch_oom_aftermath.py
Its output is bench/torch_oom_aftermath.txt, which chapter 14's page includes.
"""

import code
import gc
import sys
import weakref

import torch

made = []  # a weak reference to each step's tensor


def step():
    activations = torch.ones(1 << 20)  # 4 MiB of float32, a local of this frame
    made.append(weakref.ref(activations))
    torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: no machine has it, the allocation fails


def alive():
    return "alive" if made[-1]() is not None else "freed"


print(f"torch {torch.__version__}, Python {sys.version.split()[0]}")

# 0. The exception classes.
print(f"0. torch.OutOfMemoryError is a RuntimeError: {issubclass(torch.OutOfMemoryError, RuntimeError)}; "
      f"torch.cuda.OutOfMemoryError is the same class: {torch.cuda.OutOfMemoryError is torch.OutOfMemoryError}")

# 1. The error itself: on the CPU a failed allocation is a plain RuntimeError.
try:
    step()
except Exception as e:
    first_line = str(e).splitlines()[0]
    print(f"1. {type(e).__name__}: {first_line}")
    print(f"   an OutOfMemoryError: {isinstance(e, torch.OutOfMemoryError)}")

# 2. Caught as e: alive inside the block, freed when the block ends (Python deletes e there).
try:
    step()
except RuntimeError as e:
    print(f"2. inside the except block: {alive()}")
print(f"   after the except block: {alive()}")

# 3. Kept in a variable beyond the block: alive until that variable goes.
try:
    step()
except RuntimeError as e:
    last_error = e
print(f"3. kept as last_error after the block: {alive()}")
del last_error
print(f"   after del last_error: {alive()}")

# 4. Retrying inside the except block: the failed step's tensor is alive during the retry.
try:
    step()
except RuntimeError:
    during = alive()  # a retry here allocates beside what the failure holds
print(f"4. during a retry made inside the except block: {during}")


# 5. A function that keeps the exception in a local of its own frame: that frame is in the
#    traceback, so frame -> exception -> traceback -> frame is a cycle, freed only by the garbage
#    collector.
def train():
    try:
        step()
    except RuntimeError as e:
        failure = e  # noqa: F841 (kept on purpose)


gc.disable()
train()
print(f"5. after train() returned: {alive()}")
gc.collect()
print(f"   after gc.collect(): {alive()}")
gc.enable()

# 6. An error not caught at an interactive prompt (python's REPL; the code module runs the same
#    way): the interpreter keeps it in sys.last_value and sys.last_traceback for the debugger.
console = code.InteractiveInterpreter(locals={"step": step})
sys.stderr, stderr = open("/dev/null", "w"), sys.stderr  # the traceback it prints
console.runsource("step()")
sys.stderr = stderr
print(f"6. after the prompt printed the error: {alive()}; "
      f"sys.last_traceback is set: {sys.last_traceback is not None}")
sys.last_type = sys.last_value = sys.last_traceback = None  # and sys.last_exc from Python 3.12
print(f"   after sys.last_value = sys.last_traceback = None: {alive()}")
