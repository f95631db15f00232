"""Run by tests/test_s3_home.py in a subprocess: hold a lock of an S3 home, or race for one.

python s3_lease_holder.py runner HOME            take the runner lock, say "held", sleep until killed
python s3_lease_holder.py mutation HOME          take the mutation lock, say "held", hold it until stdin closes
python s3_lease_holder.py race HOME START        at time START try the runner lock once: say "won" (and hold it
                                                 until stdin closes) or "busy"
python s3_lease_holder.py append TABLE N TAG     append N one-row commits to a Delta table on S3
"""

from __future__ import annotations

import sys
import time

from cbp.errors import BusyError
from cbp.storage import Home


def main(argv: list[str]) -> None:
    what, loc = argv[0], argv[1]
    if what == "runner":
        with Home(loc).runner_lock("holder runner"):
            print("held", flush=True)
            time.sleep(3600)
    elif what == "mutation":
        with Home(loc).lock():
            print("held", flush=True)
            sys.stdin.read()  # held until the test, waiting for the lock, closes our stdin
    elif what == "race":
        time.sleep(max(0.0, float(argv[2]) - time.time()))
        try:
            with Home(loc).runner_lock("racer"):
                print("won", flush=True)
                sys.stdin.read()  # held until the test has heard every racer (it closes our stdin)
        except BusyError as e:
            print(e.code, flush=True)
    elif what == "append":
        import pyarrow as pa
        from deltalake import write_deltalake

        from cbp.storage.objectstore import storage_options

        for i in range(int(argv[2])):
            write_deltalake(
                loc, pa.table({"tag": [argv[3]], "i": [i]}), mode="append", storage_options=storage_options(loc)
            )
        print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
