"""Golden tables of what `accelerate launch` gives its workers, from the real tool.

    scripts/parity/make_venv.sh /work/venv-accel
    /work/venv-accel/bin/python scripts/parity/accelerate_goldens.py [CASE...]

Runs the venv's `accelerate launch` on scripts/parity/dump_env.py for each case below and writes
tests/golden/accelerate/CASE.json (and CASE.yaml, the config file that accelerate itself wrote).
tests/e2e/test_accelerate_parity.py runs `dtlaunch launch` with the same arguments and compares.

How it runs accelerate on a machine without GPUs:
- `accelerate launch` with a MULTI_GPU/FSDP/DEEPSPEED file or flag and a given num_processes never asks
  torch for GPUs: torchrun's run() starts the processes, which is what the goldens record.
- `accelerate config default` counts GPUs with torch.cuda.is_available()/device_count(); the
  "config_default_gpu" case replaces both with a fake 2 (see write_default_config) before writing.
- gpu_ids are written into CUDA_VISIBLE_DEVICES unchecked; dtlaunch needs --fake_gpus for them (each
  case's dtlaunch_extra).
Every run gets the same small environment (BASE_ENV); a golden holds only the variables a worker has
beyond it, with ports, temporary paths and the working directory replaced by <port>, <temp>, <cwd>.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN_DIR = os.path.join(HERE, "..", "..", "tests", "golden", "accelerate")
VENV_BIN = os.path.dirname(os.path.abspath(sys.executable))

# (name, what it shows, config file (ClusterConfig's fields, "default", "default_gpu" or None),
#  the accelerate launch arguments of each machine, dtlaunch's extra flags[, variables both launchers inherit])
MULTI = ["--multi_gpu", "--num_processes", "2", "--main_process_port", "{port}"]
TWO_MACHINES = ["--num_machines", "2", "--num_processes", "4", "--main_process_ip", "127.0.0.1",
                "--main_process_port", "{port}"]
CONFIG_TWO = dict(distributed_type="MULTI_GPU", num_machines=2, num_processes=4, main_process_ip="127.0.0.1",
                  main_process_port="{port}")
DS_ZERO2 = dict(gradient_accumulation_steps=4, gradient_clipping=1.0, zero_stage=2, offload_optimizer_device="cpu",
                offload_param_device="none", zero3_init_flag=False)
CASES = [
    ("flags_multi_gpu_bf16", "--multi_gpu with bf16, from flags only", None,
     [MULTI + ["--mixed_precision", "bf16"]], []),
    ("flags_cpu_fp16", "--cpu: accelerate's simple launcher, KMP_* and ACCELERATE_USE_CPU", None,
     [["--cpu", "--num_processes", "1", "--mixed_precision", "fp16"]], []),
    ("flags_fsdp", "--use_fsdp and fsdp flags", None,
     [["--use_fsdp", "--num_processes", "2", "--main_process_port", "{port}", "--mixed_precision", "bf16",
       "--fsdp_sharding_strategy", "SHARD_GRAD_OP", "--fsdp_offload_params", "True", "--fsdp_auto_wrap_policy",
       "TRANSFORMER_BASED_WRAP", "--fsdp_transformer_layer_cls_to_wrap", "BertLayer", "--fsdp_state_dict_type",
       "SHARDED_STATE_DICT", "--fsdp_backward_prefetch", "BACKWARD_PRE"]], []),
    ("flags_deepspeed", "--use_deepspeed and its flags", None,
     [["--use_deepspeed", "--num_processes", "2", "--main_process_port", "{port}", "--zero_stage", "3",
       "--gradient_accumulation_steps", "4", "--gradient_clipping", "1", "--offload_optimizer_device", "CPU",
       "--offload_param_device", "none", "--zero3_init_flag", "true", "--zero3_save_16bit_model", "True"]], []),
    ("flags_dynamo_debug_threads", "dynamo flags, --debug, --num_cpu_threads_per_process, --enable_cpu_affinity",
     None, [MULTI + ["--dynamo_backend", "inductor", "--dynamo_mode", "max-autotune", "--dynamo_use_fullgraph",
                     "--dynamo_use_dynamic", "--debug", "--num_cpu_threads_per_process", "3",
                     "--enable_cpu_affinity"]], []),
    ("flags_gpu_ids", "--gpu_ids: physical ids into CUDA_VISIBLE_DEVICES", None,
     [MULTI + ["--gpu_ids", "1,3"]], ["--fake_gpus=4"]),
    ("flags_two_machines_same_network", "2 machines, --same_network: master_addr/port", None,
     [["--multi_gpu"] + TWO_MACHINES + ["--machine_rank", str(rank), "--same_network"] for rank in (0, 1)], []),
    ("flags_two_machines_rendezvous", "2 machines without --same_network: the rendezvous endpoint", None,
     [["--multi_gpu"] + TWO_MACHINES + ["--machine_rank", str(rank)] for rank in (0, 1)], []),
    ("config_default_gpu", "`accelerate config default` on a machine with 2 GPUs", "default_gpu",
     [["--main_process_port", "{port}"]], []),
    ("config_default_cpu", "`accelerate config default` on a machine without GPUs", "default", [[]], []),
    ("config_multi_gpu_fp16", "MULTI_GPU file, fp16",
     dict(distributed_type="MULTI_GPU", num_processes=2, mixed_precision="fp16", gpu_ids="all",
          main_process_port="{port}"), [[]], []),
    ("config_multi_cpu_bf16", "MULTI_CPU file, bf16",
     dict(distributed_type="MULTI_CPU", num_processes=2, mixed_precision="bf16", use_cpu=True,
          main_process_port="{port}"), [[]], []),
    ("config_no", "NO file", dict(distributed_type="NO", num_processes=1, mixed_precision="no"), [[]], []),
    ("config_fsdp", "FSDP file, FSDP2, bf16",
     dict(distributed_type="FSDP", num_processes=2, mixed_precision="bf16", main_process_port="{port}",
          fsdp_config=dict(fsdp_version=2, fsdp_auto_wrap_policy="TRANSFORMER_BASED_WRAP",
                           fsdp_cpu_ram_efficient_loading=True, fsdp_offload_params=False,
                           fsdp_reshard_after_forward=True, fsdp_state_dict_type="SHARDED_STATE_DICT",
                           fsdp_transformer_layer_cls_to_wrap="LlamaDecoderLayer",
                           fsdp_activation_checkpointing=False)), [[]], []),
    ("config_deepspeed_zero2", "DEEPSPEED file, ZeRO-2, bf16",
     dict(distributed_type="DEEPSPEED", num_processes=2, mixed_precision="bf16", main_process_port="{port}",
          deepspeed_config=dict(gradient_accumulation_steps=1, zero_stage=2, offload_optimizer_device="none",
                                offload_param_device="none", zero3_init_flag=False)), [[]], []),
    ("config_deepspeed_zero3_offload", "DEEPSPEED file, ZeRO-3 with CPU offload",
     dict(distributed_type="DEEPSPEED", num_processes=2, mixed_precision="fp16", main_process_port="{port}",
          deepspeed_config=dict(gradient_accumulation_steps=2, gradient_clipping=1.0, zero_stage=3,
                                offload_optimizer_device="cpu", offload_param_device="cpu", zero3_init_flag=True,
                                zero3_save_16bit_model=True)), [[]], []),
    ("config_fp8", "MULTI_GPU file, fp8 through torchao",
     dict(distributed_type="MULTI_GPU", num_processes=2, mixed_precision="fp8", main_process_port="{port}",
          fp8_config=dict(backend="AO")), [[]], []),
    ("config_dynamo", "MULTI_GPU file with a dynamo_config",
     dict(distributed_type="MULTI_GPU", num_processes=2, mixed_precision="no", main_process_port="{port}",
          dynamo_config=dict(dynamo_backend="INDUCTOR", dynamo_mode="reduce-overhead", dynamo_use_fullgraph=True,
                             dynamo_use_dynamic=False, dynamo_use_regional_compilation=True)), [[]], []),
    ("config_gpu_ids", "MULTI_GPU file with gpu_ids",
     dict(distributed_type="MULTI_GPU", num_processes=2, gpu_ids="0,2", main_process_port="{port}"), [[]],
     ["--fake_gpus=4"]),
    ("config_two_machines_same_network", "2 machines, same_network: true",
     dict(CONFIG_TWO, same_network=True), [["--machine_rank", "0"], ["--machine_rank", "1"]], []),
    ("config_two_machines_rendezvous", "2 machines, same_network: false",
     dict(CONFIG_TWO, same_network=False), [["--machine_rank", "0"], ["--machine_rank", "1"]], []),
    # accelerate launch reads its --cpu flag, never ACCELERATE_USE_CPU, and a file's use_cpu only for
    # the simple launcher's variables: under either, DeepSpeed, FSDP and MULTI_GPU runs stay what the
    # file says (the workers inherit ACCELERATE_USE_CPU and read it themselves).
    ("env_use_cpu_deepspeed_zero2", "ACCELERATE_USE_CPU=true with a DEEPSPEED file (accumulation 4, clipping 1.0)",
     dict(distributed_type="DEEPSPEED", num_processes=2, main_process_port="{port}", deepspeed_config=DS_ZERO2),
     [[]], [], {"ACCELERATE_USE_CPU": "true"}),
    ("env_use_cpu_fsdp", "ACCELERATE_USE_CPU=true with an FSDP file",
     dict(distributed_type="FSDP", num_processes=2, mixed_precision="bf16", main_process_port="{port}",
          fsdp_config=dict(fsdp_version=2, fsdp_activation_checkpointing=True)), [[]], [],
     {"ACCELERATE_USE_CPU": "true"}),
    ("env_use_cpu_dynamo_fp16", "ACCELERATE_USE_CPU=true with a MULTI_GPU file, dynamo and fp16",
     dict(distributed_type="MULTI_GPU", num_processes=2, mixed_precision="fp16", main_process_port="{port}",
          dynamo_config=dict(dynamo_backend="INDUCTOR")), [[]], [], {"ACCELERATE_USE_CPU": "true"}),
    ("env_use_cpu_no", "ACCELERATE_USE_CPU=true with a NO file: the simple launcher says False",
     dict(distributed_type="NO", num_processes=1), [[]], [], {"ACCELERATE_USE_CPU": "true"}),
    ("file_use_cpu_deepspeed_zero2", "a DEEPSPEED file that says use_cpu: true",
     dict(distributed_type="DEEPSPEED", num_processes=2, use_cpu=True, main_process_port="{port}",
          deepspeed_config=DS_ZERO2), [[]], []),
    ("flags_cpu_deepspeed_file", "--cpu with a DEEPSPEED file: the simple launcher",
     dict(distributed_type="DEEPSPEED", num_processes=1, mixed_precision="bf16", deepspeed_config=DS_ZERO2),
     [["--cpu"]], []),
    ("flags_cpu_fsdp_file", "--cpu with an FSDP file: the simple launcher",
     dict(distributed_type="FSDP", num_processes=1, fsdp_config=dict(fsdp_version=2)), [["--cpu"]], []),
    ("config_deepspeed_two_machines_standard", "DeepSpeed on 2 machines, deepspeed_multinode_launcher: standard",
     dict(CONFIG_TWO, distributed_type="DEEPSPEED", same_network=True,
          deepspeed_config=dict(zero_stage=2, deepspeed_multinode_launcher="standard")),
     [["--machine_rank", "0"], ["--machine_rank", "1"]], []),
]

BASE_ENV = {"PATH": "{bin}:/usr/local/bin:/usr/bin:/bin", "HOME": "{home}", "LANG": "C.UTF-8", "PARITY_OUT": "{out}"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(spec, path, port):
    """The file as accelerate itself writes it: ClusterConfig(...).to_yaml_file() or `accelerate config default`."""
    if spec == "default":
        subprocess.run([os.path.join(VENV_BIN, "accelerate"), "config", "default", "--config_file", path],
                       check=True, capture_output=True)
    elif spec == "default_gpu":
        write_default_config(path, gpus=2)
    else:
        from accelerate.commands.config.config_args import ClusterConfig
        fields = {k: (port if v == "{port}" else v) for k, v in spec.items()}
        fields.setdefault("compute_environment", "LOCAL_MACHINE")
        fields.setdefault("mixed_precision", "no")
        fields.setdefault("use_cpu", False)
        fields.setdefault("debug", False)
        ClusterConfig(**fields).to_yaml_file(path)


def write_default_config(path, gpus):
    """`accelerate config default` with torch's GPU count faked: this machine has none."""
    code = ("import torch; torch.cuda.is_available = lambda: True; torch.cuda.device_count = lambda: %d\n"
            "from accelerate.commands.config.default import write_basic_config\n"
            "write_basic_config(mixed_precision='no', save_location=%r)\n" % (gpus, path))
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def normalized(value, cwd, tmp):
    if cwd in value:
        value = value.replace(cwd, "<cwd>")
    if value.startswith(("/tmp/", "/dev/shm/", tempfile.gettempdir() + "/")) or tmp in value:
        return "<temp>"
    return value


def worker_variables(path, base, cwd, tmp):
    """What a worker had beyond the launcher's own environment."""
    with open(path) as f:
        env = json.load(f)["env"]
    out = {}
    for k, v in env.items():
        if base.get(k) == v:
            continue
        out[k] = "<port>" if k == "MASTER_PORT" else normalized(v, cwd, tmp)
    return out


def run_case(name, about, config, machines, dtlaunch_extra, env=None):
    tmp = tempfile.mkdtemp(prefix="parity-")
    try:
        cwd, out, home = (os.path.join(tmp, d) for d in ("work", "out", "home"))
        for d in (cwd, out, home):
            os.makedirs(d)
        shutil.copy(os.path.join(HERE, "dump_env.py"), cwd)
        port = free_port()
        config_name = None
        if config is not None:
            config_name = name + ".yaml"
            write_config(config, os.path.join(cwd, config_name), port)
        base = {k: v.format(bin=VENV_BIN, home=home, out=out) for k, v in BASE_ENV.items()}
        base.update(env or {})
        procs = []
        for args in machines:
            argv = [a.replace("{port}", str(port)) for a in args]
            if config_name:
                argv = ["--config_file", config_name] + argv
            procs.append(subprocess.Popen([os.path.join(VENV_BIN, "accelerate"), "launch", *argv, "dump_env.py"],
                                          cwd=cwd, env=base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        for p in procs:
            output, _ = p.communicate(timeout=300)
            if p.returncode != 0:
                raise RuntimeError("%s: accelerate launch exited %d:\n%s" % (name, p.returncode, output))
        workers = {}
        for f in sorted(os.listdir(out)):
            rank = f[len("worker."):-len(".json")]
            workers[rank] = worker_variables(os.path.join(out, f), base, cwd, tmp)
        golden = {
            "case": name,
            "about": about,
            "config_file": config_name,
            "machines": [[a for a in args] for args in machines],
            "dtlaunch_extra": dtlaunch_extra,
            "env": env or {},
            "workers": workers,
        }
        os.makedirs(GOLDEN_DIR, exist_ok=True)
        if config_name:
            with open(os.path.join(cwd, config_name)) as src, open(os.path.join(GOLDEN_DIR, config_name), "w") as dst:
                dst.write(src.read().replace(str(port), "{port}"))
        with open(os.path.join(GOLDEN_DIR, name + ".json"), "w") as f:
            json.dump(golden, f, indent=1, sort_keys=True)
            f.write("\n")
        print("%-36s %d workers" % (name, len(workers)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    import accelerate
    import torch
    wanted = set(sys.argv[1:])
    with open(os.path.join(GOLDEN_DIR, "VERSIONS"), "w") if not wanted else open(os.devnull, "w") as f:
        f.write("accelerate %s\ntorch %s\n" % (accelerate.__version__, torch.__version__))
    for case in CASES:
        if not wanted or case[0] in wanted:
            run_case(*case)


if __name__ == "__main__":
    main()
