"""A stand-in for vLLM's server: answers /health and, like vLLM, forks a child process.

Run as ``fake_health_server.py PORT PIDS_FILE [EXIT_CODE]``: it appends "its pid, its child's pid" to PIDS_FILE,
then exits with EXIT_CODE when given, else serves until stopped.
"""

import http.server
import os
import subprocess
import sys

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(sys.argv[2], "a") as f:
    f.write(f"{os.getpid()} {child.pid}\n")
if len(sys.argv) > 3:
    sys.exit(int(sys.argv[3]))


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


print("fake server up", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
