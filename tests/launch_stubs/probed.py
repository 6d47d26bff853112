"""`probed.py SCRIPT ARGS...` is `python -m ddpify.verify.probe SCRIPT ARGS...`.

For launchers that take a script path, not `-m module` (`srun torchrun` in the
emitted sbatch script): the launched script is this one, and it runs SCRIPT
under the verification probe, which writes one record per rank into
$DDPIFY_PROBE_DIR.
"""

import sys

from ddpify.verify.probe import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
