"""What the GPU check makes sure of before it trains anything, and the wheels it carries there.

    python benchmarks/gpu_preflight.py install --wheels .whl --target /tmp/site   # gpu_check.sh, first
    python benchmarks/gpu_preflight.py check [--cpu] [--matmul_size 8192] [--json FILE]
    python benchmarks/gpu_preflight.py slim-bitsandbytes .whl --keep cpu cuda130  # gpu_wheels.sh
    python benchmarks/gpu_preflight.py carry-size .whl                             # gpu_wheels.sh

The GPU machine's image has torch, transformers, accelerate, peft and the rest, but not datasets,
evaluate or bitsandbytes, and nothing can be downloaded there: those travel as wheels in `.whl/`,
which git ignores, so a device call takes them only when its `carry` names `.whl`.

`install` puts each carried wheel into --target (pip, offline, no dependencies), except a package the
image already has at a version every carried wheel accepts (pyarrow, fsspec: the image's stays).
`check` then imports every package the check needs and prints its version; checks that each carried
package's own requirements hold (datasets 5.2.0 wants pyarrow>=24 and fsspec<=2026.9.0); runs
bitsandbytes' native code on the device (the carried wheel keeps the builds of one CUDA version only);
and times a bf16 matrix product (N x N x N, 3 warm-up products, then 10 timed), the rate MFU is
measured against. Anything missing or unmet stops it with one line that says what and how to carry it.

Only the standard library and `packaging` (in the image) are imported at the top: this file must
run, and say what is missing, where the packages it checks are not there.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
import time
import zipfile
from base64 import urlsafe_b64encode
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# Every package the check's code path imports: (import name, distribution name).
NEEDED = [
    ("torch", "torch"),
    ("transformers", "transformers"),
    ("accelerate", "accelerate"),
    ("huggingface_hub", "huggingface-hub"),
    ("numpy", "numpy"),
    ("safetensors", "safetensors"),
    ("tokenizers", "tokenizers"),
    ("peft", "peft"),
    ("datasets", "datasets"),
    ("evaluate", "evaluate"),
    ("bitsandbytes", "bitsandbytes"),
    ("pyarrow", "pyarrow"),
    ("fsspec", "fsspec"),
    ("dill", "dill"),
    ("multiprocess", "multiprocess"),
    ("pandas", "pandas"),
    ("sklearn", "scikit-learn"),
    ("scipy", "scipy"),
    ("yaml", "pyyaml"),
    ("psutil", "psutil"),
    ("packaging", "packaging"),
    ("xxhash", "xxhash"),
]
# The bf16 dense rate on the datasheet, by a part of the device's name (H100/H200 SXM: 989 TFLOP/s).
DATASHEET_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "4090": 165e12}
# What benchmarks/gpu_wheels.sh puts in .whl/ (distribution names).
CARRIED = ("datasets", "evaluate", "dill", "multiprocess", "bitsandbytes", "pyarrow", "fsspec")
CARRY_LIMIT_BYTES = 64 * 2**20  # the device call's limit on the working tree plus what it carries
HOW_TO_CARRY = (
    "where PyPI is reachable run `bash benchmarks/gpu_wheels.sh` (it fills .whl/), then call the device "
    'with carry [".whl"] and the command `bash benchmarks/gpu_check.sh` (benchmarks/README.md)'
)


def normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


# --- the wheels --------------------------------------------------------------------------------------


def wheel_name_and_version(path: Path) -> tuple[str, str]:
    name, version = path.name.split("-")[:2]
    return normalise(name), version


def wheel_requirements(path: Path) -> list:
    """The wheel's Requires-Dist that apply here (its markers hold; extras are left out)."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(path) as archive:
        metadata_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(metadata_name).decode()
    requirements = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = Requirement(line.split(":", 1)[1].strip())
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        requirements.append(requirement)
    return requirements


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def wheels_to_install(wheels: list[Path]) -> tuple[list[Path], list[str]]:
    """The carried wheels to install, and one line per wheel saying why it is or is not.

    A wheel is left out when this Python already has its package at a version that every carried
    wheel's requirement on it accepts (the image's pyarrow 25 for datasets' pyarrow>=24, say)."""
    from packaging.version import Version

    carried = {wheel_name_and_version(path)[0]: path for path in wheels}
    wanted: dict[str, list] = {}
    for path in wheels:
        for requirement in wheel_requirements(path):
            wanted.setdefault(normalise(requirement.name), []).append((path.name, requirement))
    chosen, lines = [], []
    for name, path in sorted(carried.items()):
        version = installed_version(name)
        needs = [requirement for _, requirement in wanted.get(name, [])]
        if (
            version is not None
            and needs
            and all(
                requirement.specifier.contains(Version(version), prereleases=True) for requirement in needs
            )
        ):
            lines.append(
                f"  {name}: this Python has {version}, which {', '.join(map(str, needs))} accepts: kept"
            )
            continue
        reason = "not installed" if version is None else f"has {version}"
        if version is not None and not needs:
            reason += ", the carried version is used"
        elif version is not None:
            reason += f", needed {', '.join(str(r.specifier) for r in needs)}"
        lines.append(f"  {name}: {reason}: installing {path.name}")
        chosen.append(path)
    return chosen, lines


def install(wheels_dir: Path, target: Path) -> int:
    if not wheels_dir.is_dir() or not any(wheels_dir.glob("*.whl")):
        print(f"preflight: no wheels in {wheels_dir}/ to install (the check below says what is missing)")
        return 0
    chosen, lines = wheels_to_install(sorted(wheels_dir.glob("*.whl")))
    print(f"preflight: carried wheels in {wheels_dir}/:", *lines, sep="\n")
    if not chosen:
        return 0
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
    command += ["--no-cache-dir", "--upgrade", "--target", str(target), *map(str, chosen)]
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode != 0:
        tail = " ".join((completed.stderr or completed.stdout).split())[-600:]
        print(f"preflight: cannot install the carried wheels into {target}: {tail}")
        return completed.returncode
    return 0


def slim_bitsandbytes(wheels_dir: Path, keep: list[str]) -> int:
    """Rewrite the bitsandbytes wheel in `wheels_dir` with only the native libraries named in `keep`
    (libbitsandbytes_<keep>.so): the published wheel holds one per CUDA and ROCm version (~43 MB);
    the device's torch (2.11.0+cu130) loads libbitsandbytes_cuda130.so, the CPU rehearsal _cpu.so.
    The wheel's RECORD is rewritten to list what is left, with hashes, as a wheel's must."""
    (path,) = sorted(wheels_dir.glob("bitsandbytes-*.whl")) or [None]
    if path is None:
        print(f"no bitsandbytes wheel in {wheels_dir}/", file=sys.stderr)
        return 2
    kept_libraries = {f"libbitsandbytes_{name}.so" for name in keep}
    with zipfile.ZipFile(path) as archive:
        entries = [(info, archive.read(info)) for info in archive.infolist()]
    libraries = {Path(info.filename).name for info, _ in entries if info.filename.endswith(".so")}
    if not kept_libraries <= libraries:
        missing = ", ".join(sorted(kept_libraries - libraries))
        print(f"{path.name} has no {missing} (it has {', '.join(sorted(libraries))})", file=sys.stderr)
        return 2
    kept = [
        (info, data)
        for info, data in entries
        if not (info.filename.endswith(".so") and Path(info.filename).name not in kept_libraries)
    ]
    record_name = next(info.filename for info, _ in kept if info.filename.endswith(".dist-info/RECORD"))
    record = []
    for info, data in kept:
        if info.filename == record_name:
            continue
        digest = urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{info.filename},sha256={digest},{len(data)}")
    record.append(f"{record_name},,")
    slimmed = path.with_suffix(".slim")
    with zipfile.ZipFile(slimmed, "w", zipfile.ZIP_DEFLATED) as archive:
        for info, data in kept:
            archive.writestr(info, "\n".join(record) + "\n" if info.filename == record_name else data)
    before = path.stat().st_size
    slimmed.replace(path)
    print(
        f"{path.name}: kept {', '.join(sorted(kept_libraries))} of {len(libraries)} native libraries, "
        f"{before / 2**20:.1f} MiB -> {path.stat().st_size / 2**20:.1f} MiB"
    )
    return 0


def travelling_bytes(carried: list[Path]) -> tuple[int, int]:
    """(bytes of the working tree that travels: tracked and untracked-not-ignored files; bytes of the
    carried paths)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, check=True, cwd=REPO_ROOT,
    ).stdout.decode()  # fmt: skip
    tree = sum(
        (REPO_ROOT / name).stat().st_size for name in listed.split("\0") if (REPO_ROOT / name).is_file()
    )
    carried_bytes = sum(
        file.stat().st_size for path in carried for file in ([path] if path.is_file() else path.rglob("*"))
        if file.is_file()
    )  # fmt: skip
    return tree, carried_bytes


def carry_size(carried: list[Path]) -> int:
    tree, carried_bytes = travelling_bytes(carried)
    total = tree + carried_bytes
    names = ", ".join(str(path) for path in carried)
    print(
        f"travels to the device: working tree {tree / 2**20:.1f} MiB + carried {names} "
        f"{carried_bytes / 2**20:.1f} MiB = {total / 2**20:.1f} MiB of the {CARRY_LIMIT_BYTES / 2**20:.0f} MiB limit"
    )
    if total > CARRY_LIMIT_BYTES:
        print(f"over the limit by {(total - CARRY_LIMIT_BYTES) / 2**20:.1f} MiB: carry less", file=sys.stderr)
        return 1
    return 0


# --- the check ---------------------------------------------------------------------------------------


def import_versions() -> tuple[dict[str, str], list[str]]:
    """{distribution: version} of every needed package that imports, and 'name (why)' of those that do not."""
    versions, missing = {}, []
    for module, distribution in NEEDED:
        try:
            importlib.import_module(module)
        except Exception as error:  # an ABI mismatch is as fatal as an absent package
            why = (
                "not installed"
                if isinstance(error, ModuleNotFoundError)
                else f"{type(error).__name__}: {error}"
            )
            missing.append(f"{distribution} ({why[:160]})")
            continue
        versions[distribution] = installed_version(distribution) or "?"
    return versions, missing


def unmet_requirements(
    distributions=("datasets", "evaluate", "bitsandbytes", "peft", "accelerate"),
) -> list[str]:
    """'datasets 5.2.0 needs pyarrow>=24.0.0, found 23.0.1' for each requirement of these that does not hold."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    unmet = []
    for distribution in distributions:
        version = installed_version(distribution)
        if version is None:
            continue
        for line in importlib.metadata.requires(distribution) or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            found = installed_version(requirement.name)
            if found is None:
                unmet.append(f"{distribution} {version} needs {requirement}, not installed")
            elif not requirement.specifier.contains(Version(found), prereleases=True):
                unmet.append(f"{distribution} {version} needs {requirement}, found {found}")
    return unmet


def bitsandbytes_runs(device: str) -> str | None:
    """None if bitsandbytes' native code runs on `device` (a 4-bit quantization and an 8-bit AdamW
    step on a tensor past min_8bit_size), else why not."""
    try:
        import bitsandbytes as bnb
        import torch

        weight = torch.randn(64, 128, device=device)
        bnb.functional.quantize_4bit(weight, quant_type="nf4")
        parameter = torch.nn.Parameter(torch.randn(128, 128, device=device))
        optimizer = bnb.optim.AdamW8bit([parameter])
        parameter.grad = torch.randn_like(parameter)
        optimizer.step()
        return None
    except Exception as error:
        return f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"


def cpu_has_native_bf16() -> bool:
    """AVX-512 BF16 or AMX: the CPUs on which the recipes train in bf16 (config/precision.py); elsewhere
    fp32, and a bf16 matmul runs about 60x slower than the run's own."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def matmul_rate(device: str, size: int, warmup: int = 3, timed: int = 10) -> dict:
    """FLOP/s of an N x N x N matrix product on `device` in the precision a run trains in there (bf16 on a
    GPU and on a CPU with native bf16, else fp32: the MFU's denominator must be the run's own kind of
    matmul), the mean over `timed` products after `warmup` (random data: zeros run faster on a GPU)."""
    import torch

    dtype = torch.bfloat16 if device != "cpu" or cpu_has_native_bf16() else torch.float32
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(warmup):
        torch.mm(a, b)
    synchronize()
    started = time.perf_counter()
    for _ in range(timed):
        torch.mm(a, b)
    synchronize()
    seconds = (time.perf_counter() - started) / timed
    return {
        "size": size,
        "dtype": str(dtype).removeprefix("torch."),
        "warmup": warmup,
        "timed": timed,
        "flops": 2 * size**3 / seconds,
    }


def device_description(cpu: bool) -> tuple[str, str, float | None, int]:
    """(device, name, datasheet bf16 FLOP/s or None, memory bytes)."""
    import platform

    import torch

    if cpu:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return "cpu", f"CPU ({platform.machine()}, {os.cpu_count()} cores)", None, memory
    properties = torch.cuda.get_device_properties(0)
    peak = next((flops for key, flops in DATASHEET_BF16_FLOPS.items() if key in properties.name), None)
    return "cuda", properties.name, peak, properties.total_memory


def check(cpu: bool, matmul_size: int, json_path: Path | None) -> int:
    import platform

    versions, missing = import_versions()
    unmet = unmet_requirements() if not missing or "packaging" in versions else []
    print(f"python {platform.python_version()}; " + ", ".join(f"{name} {v}" for name, v in versions.items()))
    if missing or unmet:
        problems = [f"missing {', '.join(missing)}"] if missing else []
        problems += unmet
        uncarried = [m.split(" ")[0] for m in missing if m.split(" ")[0] not in CARRIED]
        fix = f"To carry them: {HOW_TO_CARRY}"
        if uncarried:
            fix = (
                f"{', '.join(uncarried)} should be in the image, not carried: is {sys.executable} the image's "
                f"python3 (GPU_CHECK_PYTHON)? For the rest: {HOW_TO_CARRY}"
            )
        print(f"gpu_check cannot run: {'; '.join(problems)}. {fix}.", flush=True)
        return 3
    import torch

    if not cpu and not torch.cuda.is_available():
        print(
            "gpu_check cannot run: torch sees no CUDA device here; run with --cpu --tiny to rehearse on a CPU."
        )
        return 3
    device, name, datasheet, memory = device_description(cpu)
    problem = bitsandbytes_runs(device)
    if problem:
        print(
            f"gpu_check cannot run: bitsandbytes {versions['bitsandbytes']} does not run on {name} "
            f"(torch {torch.__version__}, CUDA {torch.version.cuda}): {problem}. gpu_wheels.sh keeps only the "
            f"native library for BNB_CUDA (default 130, torch's cu130): rerun it with the CUDA version above."
        )
        return 3
    rate = matmul_rate(device, matmul_size)
    print(
        f"device: {name}; {rate['dtype']} {matmul_size}-cube matmul {rate['flops'] / 1e12:.2f} TFLOP/s measured"
        + (f", {datasheet / 1e12:.0f} on the datasheet" if datasheet else ""),
        flush=True,
    )
    if json_path is not None:
        report = {
            "python": platform.python_version(),
            "versions": versions,
            "device": device,
            "device_name": name,
            "device_memory_bytes": memory,
            "cuda": torch.version.cuda,
            "matmul": rate,
            "datasheet_bf16_flops": datasheet,
        }
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    installing = commands.add_parser("install", help="install the carried wheels this Python lacks")
    installing.add_argument("--wheels", type=Path, default=REPO_ROOT / ".whl")
    installing.add_argument("--target", type=Path, default=Path("/tmp/site"))
    checking = commands.add_parser("check", help="imports, versions, requirements, bitsandbytes, matmul rate")
    checking.add_argument("--cpu", action="store_true")
    checking.add_argument("--matmul_size", type=int, default=8192)
    checking.add_argument("--json", type=Path, default=None)
    slimming = commands.add_parser("slim-bitsandbytes", help="keep only some native libraries")
    slimming.add_argument("wheels", type=Path)
    slimming.add_argument("--keep", nargs="+", default=["cpu", "cuda130"])
    sizing = commands.add_parser("carry-size", help="what a device call sends, against its 64 MiB limit")
    sizing.add_argument("carried", type=Path, nargs="*")
    args = parser.parse_args(argv)
    if args.command == "install":
        return install(args.wheels, args.target)
    if args.command == "check":
        return check(args.cpu, args.matmul_size, args.json)
    if args.command == "slim-bitsandbytes":
        return slim_bitsandbytes(args.wheels, args.keep)
    return carry_size(args.carried)


if __name__ == "__main__":
    sys.exit(main())
