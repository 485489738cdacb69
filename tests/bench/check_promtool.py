#!/usr/bin/env python3
"""promtool (Debian's prometheus package) must find nothing wrong in pcached's metrics."""
import subprocess
import sys

text = subprocess.run([sys.argv[1]], check=True, capture_output=True).stdout
result = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True)
sys.stdout.buffer.write(result.stdout + result.stderr)
sys.exit(result.returncode)
