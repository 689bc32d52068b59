"""The `settings` area of the conformance suite: torch 2.15's allocator-settings parser.

Runs `torch._C._accelerator_setAllocatorSettings` (what `PYTORCH_ALLOC_CONF` feeds) on each
scenario's setting strings, on CPU, and records what torch does: the error it raises (type and
text), or, when it accepts, every value it parsed. The values are read from torch's own
configuration objects through `ctypes` (`c10::CachingAllocator::AcceleratorAllocatorConfig` and
`c10::cuda::CUDACachingAllocator::CUDAAllocatorConfig`, whose member layout is the one in the
wheel's headers `torch/include/c10/core/AllocatorConfig.h` and
`torch/include/c10/cuda/CUDAAllocatorConfig.h`). Each scenario runs in a fresh forked process, so
no state leaks from one scenario to the next.

Run with the pinned torch: `/root/.cache/gpumem-workbook/torch-2.15.0/bin/python
conformance/settings.py` writes `conformance/goldens/settings.json` (byte-identical on rerun).
"""

import ctypes
import json
import os
import pickle
import sys

# The environment must not configure the allocator before the scenarios do.
for _name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
    os.environ.pop(_name, None)

import torch  # noqa: E402

TORCH_VERSION = "2.15.0"
MIB = 1 << 20

# Each scenario: its name and the setting strings applied in order (the facts are about the last).
SCENARIOS = [
    # accepted, and what each option parses to
    ("empty string", [""]),
    ("max_split_size_mb:20", ["max_split_size_mb:20"]),
    ("max_split_size_mb:128", ["max_split_size_mb:128"]),
    ("max_non_split_rounding_mb:40", ["max_non_split_rounding_mb:40"]),
    ("garbage_collection_threshold:0.6", ["garbage_collection_threshold:0.6"]),
    ("expandable_segments:True", ["expandable_segments:True"]),
    ("expandable_segments:False", ["expandable_segments:False"]),
    ("roundup_power2_divisions:4", ["roundup_power2_divisions:4"]),
    ("roundup_power2_divisions:[64:8,256:4,>:1]", ["roundup_power2_divisions:[64:8,256:4,>:1]"]),
    ("roundup_power2_divisions:[1:2,2:4]", ["roundup_power2_divisions:[1:2,2:4]"]),
    ("roundup_power2_divisions:[>:4]", ["roundup_power2_divisions:[>:4]"]),
    ("roundup_power2_divisions:[1024:4,64:2]", ["roundup_power2_divisions:[1024:4,64:2]"]),
    ("roundup_power2_divisions:[131072:4]", ["roundup_power2_divisions:[131072:4]"]),
    ("roundup_power2_divisions:[64:0]", ["roundup_power2_divisions:[64:0]"]),
    ("roundup_power2_divisions:[]", ["roundup_power2_divisions:[]"]),
    ("large_segment_size_mb:40", ["large_segment_size_mb:40"]),
    ("large_segment_size_mb:11", ["large_segment_size_mb:11"]),
    ("large_segment_size_mb:40,max_split_size_mb:40", ["large_segment_size_mb:40,max_split_size_mb:40"]),
    ("pinned_use_background_threads:True", ["pinned_use_background_threads:True"]),
    ("release_lock_on_cudamalloc:True", ["release_lock_on_cudamalloc:True"]),
    ("release_lock_on_hipmalloc:True", ["release_lock_on_hipmalloc:True"]),
    ("pinned_use_cuda_host_register:True", ["pinned_use_cuda_host_register:True"]),
    ("pinned_use_hip_host_register:True", ["pinned_use_hip_host_register:True"]),
    ("pinned_num_register_threads:8", ["pinned_num_register_threads:8"]),
    ("pinned_num_register_threads:128", ["pinned_num_register_threads:128"]),
    ("graph_capture_record_stream_reuse:True", ["graph_capture_record_stream_reuse:True"]),
    ("pinned_free_catch_all:True", ["pinned_free_catch_all:True"]),
    ("backend:native", ["backend:native"]),
    ("per_process_memory_fraction:0.5", ["per_process_memory_fraction:0.5"]),
    ("throw_on_cudamalloc_oom:True", ["throw_on_cudamalloc_oom:True"]),
    ("pinned_reserve_segment_size_mb:64", ["pinned_reserve_segment_size_mb:64"]),
    ("expandable_segments_reserve:0.5", ["expandable_segments_reserve:0.5"]),
    ("expandable_segments_reserve_by_class:[a:0.5,b:4G]", ["expandable_segments_reserve_by_class:[a:0.5,b:4G]"]),
    ("spaces and tabs are dropped", ["max_split_size_mb: 64 ,\texpandable_segments : True"]),
    ("a trailing comma", ["expandable_segments:True,"]),
    ("several options", [
        "max_split_size_mb:64,max_non_split_rounding_mb:40,garbage_collection_threshold:0.6,"
        "expandable_segments:True,pinned_use_background_threads:True,release_lock_on_cudamalloc:True,"
        "pinned_num_register_threads:8"
    ]),
    # what a second string keeps and what it resets
    ("a second string resets max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold and max_non_split_rounding_mb", [
        "max_split_size_mb:64,roundup_power2_divisions:4,garbage_collection_threshold:0.5,"
        "max_non_split_rounding_mb:40,expandable_segments:True,large_segment_size_mb:30,"
        "pinned_num_register_threads:4,release_lock_on_cudamalloc:True",
        "pinned_use_background_threads:True",
    ]),
    ("max_split_size_mb's floor follows an earlier large_segment_size_mb", [
        "large_segment_size_mb:40", "max_split_size_mb:39",
    ]),
    # refused, with torch's words
    ("max_split_size_mb:19", ["max_split_size_mb:19"]),
    ("max_non_split_rounding_mb:19", ["max_non_split_rounding_mb:19"]),
    ("large_segment_size_mb:10", ["large_segment_size_mb:10"]),
    ("large_segment_size_mb:40,max_split_size_mb:39", ["large_segment_size_mb:40,max_split_size_mb:39"]),
    ("max_split_size_mb:39,large_segment_size_mb:40", ["max_split_size_mb:39,large_segment_size_mb:40"]),
    ("garbage_collection_threshold:0", ["garbage_collection_threshold:0"]),
    ("garbage_collection_threshold:1", ["garbage_collection_threshold:1"]),
    ("garbage_collection_threshold:1.5", ["garbage_collection_threshold:1.5"]),
    ("roundup_power2_divisions:3", ["roundup_power2_divisions:3"]),
    ("roundup_power2_divisions:0", ["roundup_power2_divisions:0"]),
    ("roundup_power2_divisions:[64:3]", ["roundup_power2_divisions:[64:3]"]),
    ("roundup_power2_divisions:[63:4]", ["roundup_power2_divisions:[63:4]"]),
    ("expandable_segments:true", ["expandable_segments:true"]),
    ("expandable_segments:1", ["expandable_segments:1"]),
    ("max_split_size_mb:20,expandable_segments:true", ["max_split_size_mb:20,expandable_segments:true"]),
    ("release_lock_on_cudamalloc:1", ["release_lock_on_cudamalloc:1"]),
    ("pinned_use_cuda_host_register:yes", ["pinned_use_cuda_host_register:yes"]),
    ("pinned_use_background_threads:yes", ["pinned_use_background_threads:yes"]),
    ("graph_capture_record_stream_reuse:x", ["graph_capture_record_stream_reuse:x"]),
    ("pinned_free_catch_all:x", ["pinned_free_catch_all:x"]),
    ("throw_on_cudamalloc_oom:1", ["throw_on_cudamalloc_oom:1"]),
    ("pinned_num_register_threads:3", ["pinned_num_register_threads:3"]),
    ("pinned_num_register_threads:256", ["pinned_num_register_threads:256"]),
    ("pinned_reserve_segment_size_mb:0", ["pinned_reserve_segment_size_mb:0"]),
    ("per_process_memory_fraction:2", ["per_process_memory_fraction:2"]),
    ("per_process_memory_fraction:-0.1", ["per_process_memory_fraction:-0.1"]),
    ("backend:magic", ["backend:magic"]),
    ("backend:hipMallocAsync", ["backend:hipMallocAsync"]),
    ("cheese:1", ["cheese:1"]),
    ("pinned_max_cached_size:1", ["pinned_max_cached_size:1"]),
    ("expandable_segments_handle_type:posix_fd", ["expandable_segments_handle_type:posix_fd"]),
    ("max_split_size_mb=64", ["max_split_size_mb=64"]),
    ("max_split_size_mb:64,,expandable_segments:True", ["max_split_size_mb:64,,expandable_segments:True"]),
    ("max_split_size_mb:20:30", ["max_split_size_mb:20:30"]),
    ("a lone colon", [":"]),
    ("the device pass comes second", ["pinned_num_register_threads:3,max_split_size_mb:19"]),
    # torch's C++ shows through: internal asserts, std::stoull and std::stod
    ("max_split_size_mb", ["max_split_size_mb"]),
    ("max_split_size_mb:", ["max_split_size_mb:"]),
    ("backend:", ["backend:"]),
    ("roundup_power2_divisions:[64:4", ["roundup_power2_divisions:[64:4"]),
    ("backend:cudaMallocAsync", ["backend:cudaMallocAsync"]),
    ("max_split_size_mb:abc", ["max_split_size_mb:abc"]),
    ("garbage_collection_threshold:abc", ["garbage_collection_threshold:abc"]),
    ("max_split_size_mb:18446744073709551616", ["max_split_size_mb:18446744073709551616"]),
    ("max_split_size_mb:64abc", ["max_split_size_mb:64abc"]),
    ("max_split_size_mb:-1", ["max_split_size_mb:-1"]),
    ("garbage_collection_threshold:0.5x", ["garbage_collection_threshold:0.5x"]),
    ("max_split_size_mb:64 expandable_segments:True", ["max_split_size_mb:64 expandable_segments:True"]),
    ("max_split_size_mb,64", ["max_split_size_mb,64"]),
    ("expandable_segments_reserve:abc", ["expandable_segments_reserve:abc"]),
]


def _lib(name):
    return ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", name))


def _values():
    """Every value torch's two configuration objects hold now."""
    c10 = _lib("libc10.so")
    instance = c10._ZN3c1016CachingAllocator26AcceleratorAllocatorConfig8instanceEv
    instance.restype = ctypes.c_void_p
    divisions = c10._ZN3c1016CachingAllocator26AcceleratorAllocatorConfig24roundup_power2_divisionsEm
    divisions.restype = ctypes.c_size_t
    divisions.argtypes = [ctypes.c_size_t]
    acc = instance()

    def size_at(base, offset):
        return ctypes.c_size_t.from_address(base + offset).value

    def bool_at(base, offset):
        return ctypes.c_bool.from_address(base + offset).value

    def double_at(base, offset):
        return ctypes.c_double.from_address(base + offset).value

    # AcceleratorAllocatorConfig: large_segment_size_, max_split_size_,
    # max_non_split_rounding_size_, roundup_power2_divisions_ (a vector), garbage_collection_threshold_,
    # use_expandable_segments_, pinned_use_background_threads_.
    values = {
        "large_segment_size": size_at(acc, 0),
        "max_split_size": size_at(acc, 8),
        "max_non_split_rounding_size": size_at(acc, 16),
        "garbage_collection_threshold": double_at(acc, 48),
        "expandable_segments": bool_at(acc, 56),
        "pinned_use_background_threads": bool_at(acc, 57),
        # interval i holds sizes in [2^i MiB, 2^(i+1) MiB); interval 0 also everything below
        "roundup_power2_divisions": [divisions(MIB << i) for i in range(16)],
    }
    # CUDAAllocatorConfig, created by the first setting string: m_pinned_num_register_threads,
    # m_pinned_reserve_segment_size_mb, the handle type (an int), m_release_lock_on_cudamalloc,
    # m_pinned_use_cuda_host_register, m_graph_capture_record_stream_reuse,
    # m_per_process_memory_fraction, m_pinned_free_catch_all, m_throw_on_cudamalloc_oom.
    cuda = ctypes.c_void_p.in_dll(
        _lib("libc10_cuda.so"),
        "_ZZN3c104cuda20CUDACachingAllocator19CUDAAllocatorConfig8instanceEvE10s_instance",
    ).value
    values.update({
        "pinned_num_register_threads": size_at(cuda, 0),
        "pinned_reserve_segment_size_mb": size_at(cuda, 8),
        "release_lock_on_cudamalloc": bool_at(cuda, 20),
        "pinned_use_cuda_host_register": bool_at(cuda, 21),
        "graph_capture_record_stream_reuse": bool_at(cuda, 22),
        "per_process_memory_fraction": double_at(cuda, 24),
        "pinned_free_catch_all": bool_at(cuda, 32),
        "throw_on_cudamalloc_oom": bool_at(cuda, 33),
    })
    values["settings"] = torch._C._accelerator_getAllocatorSettings()
    return values


def _run(texts):
    """Applies `texts` in order; the error of the first that fails, or every value parsed."""
    try:
        for text in texts:
            torch._C._accelerator_setAllocatorSettings(text)
    except Exception as e:  # torch raises ValueError, RuntimeError or IndexError here
        return {"error": str(e), "error_type": type(e).__name__}
    values = _values()
    values["error"] = None
    return values


def _in_fresh_process(texts):
    """`_run` in a forked child, so each scenario starts from torch's defaults."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        # torch's C++ warnings (an ignored reserve value) go to stderr, not into the facts
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        with os.fdopen(write, "wb") as out:
            pickle.dump(_run(texts), out)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as inp:
        result = pickle.load(inp)
    os.waitpid(pid, 0)
    return result


def settings_facts():
    """Every fact of the settings area, in scenario order."""
    facts = []
    for scenario, texts in SCENARIOS:
        result = _in_fresh_process(texts)
        result["texts"] = texts  # the scenario's input, for the Rust test to replay
        for fact in sorted(result):
            facts.append({"scenario": scenario, "fact": fact, "value": result[fact]})
    return facts


def main():
    if not torch.__version__.startswith(TORCH_VERSION):
        sys.exit(f"the goldens are torch {TORCH_VERSION}'s; this is torch {torch.__version__}")
    golden = {
        "area": "settings",
        "torch_version": TORCH_VERSION,
        "generated_by": "conformance/settings.py",
        "facts": settings_facts(),
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "goldens", "settings.json")
    with open(path, "w") as f:
        json.dump(golden, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    print(f"{path}: {len(golden['facts'])} facts")


if __name__ == "__main__":
    main()
