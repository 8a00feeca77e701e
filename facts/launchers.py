"""The launchers the job kinds start, as far as the stack derives their options: Open MPI's ``mpirun``
(``mpi``, ``nccl-test``; on SageMaker the training toolkit's) and PyTorch's ``torchrun``
(``pytorch-elastic``). Every spelling of each option those launchers read, so that one written by
hand is found however it is written (``jobs/launchers.py`` refuses it).
"""

from __future__ import annotations

# Open MPI's mpirun (orterun) 4.1, as AWS's EFA installer ships it in /opt/amazon/openmpi (the MPI
# kinds' default mpirun; SageMaker's images run the same): its option table, cmd_line_init in
# orte/orted/orted_submit.c, spells the process count -c, -np, --np, -n and --n ("-c, -n, --n, -np,
# and --np are all synonyms"); the hosts -H, -host, --host and the host files -hostfile, --hostfile,
# -machinefile, --machinefile, -default-hostfile, --default-hostfile; the processes per node
# -npernode, --npernode and -N, and one process per node -pernode, --pernode (no value). Open MPI 5's
# mpirun (PRRTE) keeps these spellings (its mpirun(1): -c, -n, --n, --np; -H, --host, --hostfile,
# --machinefile, --default-hostfile).
MPIRUN_OPTIONS: dict[str, tuple[str, ...]] = {
    "processes": ("-c", "-n", "--n", "-np", "--np"),
    "hosts": (
        "-H",
        "-host",
        "--host",
        "-hostfile",
        "--hostfile",
        "-machinefile",
        "--machinefile",
        "-default-hostfile",
        "--default-hostfile",
    ),
    "per node": ("-N", "-npernode", "--npernode", "-pernode", "--pernode"),
}
MPIRUN_FLAGS = ("-pernode", "--pernode")
# The mapping policy, -map-by/--map-by (the same table): ``ppr:N:node`` (N processes per node; ppr:N:socket
# and the other objects likewise per object) places the processes itself, against the slots the stack
# gives each node (slotsPerWorker); the stack's own mapping is ``--map-by slot``.
MPIRUN_MAP_BY = ("-map-by", "--map-by")
# N processes per socket of each node: -npersocket/--npersocket N, "deprecated in favor of --map-by
# ppr:n:socket" (orterun(1), Open MPI 1.8 to 4.1): the same placement as that mapping, so refused with it.
MPIRUN_PER_SOCKET = ("-npersocket", "--npersocket")
MPIRUN_PPR = "ppr"
# The names mpirun is started by: Open MPI's mpirun, mpiexec and orterun (links to one program).
MPIRUN_NAMES = ("mpirun", "mpiexec", "orterun")

# torchrun (torch.distributed.run; torch.distributed.launch parses with the same table): every option
# of its argument parser, get_args_parser() in torch 2.13.0 (the version the integration tests run;
# tests/integration/test_launcher_options.py compares this table with it), by destination, and the
# options that take no value. Each option's default is the environment variable PET_<DEST> and a value
# on the command line wins over it (torch/distributed/argparse_util.py, ``env``). argparse takes a
# long option by any prefix that only one option has (``--nnode`` is ``--nnodes``).
TORCHRUN_OPTIONS: dict[str, tuple[str, ...]] = {
    "help": ("-h", "--help"),
    "nnodes": ("--nnodes",),
    "nproc_per_node": ("--nproc-per-node", "--nproc_per_node"),
    "rdzv_backend": ("--rdzv-backend", "--rdzv_backend"),
    "rdzv_endpoint": ("--rdzv-endpoint", "--rdzv_endpoint"),
    "rdzv_id": ("--rdzv-id", "--rdzv_id"),
    "rdzv_conf": ("--rdzv-conf", "--rdzv_conf"),
    "standalone": ("--standalone",),
    "max_restarts": ("--max-restarts", "--max_restarts"),
    "monitor_interval": ("--monitor-interval", "--monitor_interval"),
    "start_method": ("--start-method", "--start_method"),
    "event_log_handler": ("--event-log-handler", "--event_log_handler"),
    "role": ("--role",),
    "module": ("-m", "--module"),
    "no_python": ("--no-python", "--no_python"),
    "run_path": ("--run-path", "--run_path"),
    "log_dir": ("--log-dir", "--log_dir"),
    "redirects": ("-r", "--redirects"),
    "tee": ("-t", "--tee"),
    "local_ranks_filter": ("--local-ranks-filter", "--local_ranks_filter"),
    "duplicate_stdout_filters": ("--duplicate-stdout-filters", "--duplicate_stdout_filters"),
    "duplicate_stderr_filters": ("--duplicate-stderr-filters", "--duplicate_stderr_filters"),
    "node_rank": ("--node-rank", "--node_rank"),
    "master_addr": ("--master-addr", "--master_addr"),
    "master_port": ("--master-port", "--master_port"),
    "local_addr": ("--local-addr", "--local_addr"),
    "logs_specs": ("--logs-specs", "--logs_specs"),
    "numa_binding": ("--numa-binding", "--numa_binding"),
    "signals_to_handle": ("--signals-to-handle", "--signals_to_handle"),
    "shutdown_timeout": ("--shutdown-timeout", "--shutdown_timeout"),
    "virtual_local_rank": ("--virtual-local-rank", "--virtual_local_rank"),
}
TORCHRUN_FLAGS = frozenset({"help", "standalone", "module", "no_python", "run_path", "virtual_local_rank"})
# The modules ``python -m`` starts torchrun as.
TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
# CPython's own options before ``-m`` (python(1), 3.10-3.13): the ones that take a value (``-W arg``,
# ``-X opt``, also written joined: ``-Xfaulthandler``), and the one-letter flags, which combine (``-uB``).
PYTHON_OPTIONS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")
PYTHON_FLAG_LETTERS = frozenset("bBdEhiIOPqRsSuvVx")
# env(1) in front of a launcher (``env FOO=1 torchrun ...``): GNU coreutils 9 env's options that take a
# value as the next argument (-u NAME, -C DIR) and those that take none (-i, -0, -v, --debug, ...; the
# long ones with a value joined by '='), then NAME=VALUE assignments, then the command it runs
# (coreutils env(1), "env [OPTION]... [-] [NAME=VALUE]... [COMMAND [ARG]...]"). ``-S``/``--split-string``
# splits one argument into several: a line using it is not read.
ENV_NAMES = ("env",)
ENV_OPTIONS_WITH_VALUE = ("-u", "-C", "--unset", "--chdir")
ENV_FLAGS = ("-i", "-0", "-v", "-", "--", "--ignore-environment", "--null", "--debug")
# Shells whose ``-c SCRIPT`` (also combined, ``-lc``, ``-ec``) runs a command line written as one string.
SHELLS = ("bash", "sh", "dash", "zsh", "ksh")

# The torchrun options the training operator (v1.9.4) sets for an elastic PyTorchJob, as PET_*
# variables (pkg/controller.v1/pytorch/envvar.go and elastic.go; restated in
# tests/integration/test_elastic_rendezvous.py): the processes per node, the node range, the
# rendezvous backend, endpoint and id, and the restarts. --standalone replaces the rendezvous with
# one of its own on localhost.
TORCHRUN_DERIVED = (
    "nproc_per_node",
    "nnodes",
    "rdzv_backend",
    "rdzv_endpoint",
    "rdzv_id",
    "max_restarts",
    "standalone",
)
