"""Run every benchmark of bench/ in turn (``make bench``); figures go to stdout.

Each benchmark runs its contender and its baseline in the same run and prints the
ratio.  Record results in bench/RESULTS.md with the date and the machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent

for script in ("bench_custom_loop.py", "bench_data.py", "bench_fit.py", "bench_jit.py",
               "bench_checkpoint.py", "bench_estimator.py", "bench_parameter_server.py"):
    print(f"== {script}", flush=True)
    subprocess.run([sys.executable, str(HERE / script), *sys.argv[1:]], check=True)
