"""Runs a command and passes its stdout through line by line, also appending each JSON line, stamped with the
time it arrived (`t`, Unix seconds), to CLOCK_FILE: the timeline of a trainer's event lines for
bench/realloop.py. Standard library only; stderr and the exit status pass through untouched.

    python bench/lib/clock.py CLOCK_FILE COMMAND [ARGS...]
"""

import json
import subprocess
import sys
import time

clock_file, command = sys.argv[1], sys.argv[2:]
process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
with open(clock_file, "a") as clock:
    clock.write(json.dumps({"t": time.time(), "type": "process_started"}) + "\n")
    for line in process.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            clock.write(json.dumps({"t": time.time(), "type": event.get("type")}) + "\n")
            clock.flush()
sys.exit(process.wait())
