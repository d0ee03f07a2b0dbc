"""On PYTHONPATH, every Python process (test workers included) dumps all its threads' stacks to stderr
once it has run PAGODA_HANG_DUMP_S seconds (default 90): where a hung run waits."""
import faulthandler
import os

faulthandler.dump_traceback_later(float(os.environ.get("PAGODA_HANG_DUMP_S", "90")), exit=False)
