"""docs/clients.md's Python example: a call, then a stream. batcherd's
address is the first argument, else $BATCHER_ADDR, else 127.0.0.1:50051."""

import os
import sys

import batcher_client as bc

target = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BATCHER_ADDR", "127.0.0.1:50051")
with bc.Client(target, timeout=30) as c:
    print(c.submit(bc.chat("sim-chat", "Hello there", max_tokens=16)).text)
    with c.stream(verbosity=bc.pb.VERBOSITY_ALL) as s:
        for i in range(3):
            s.send(bc.complete("sim-completion", f"Story {i}:", max_tokens=8))
        s.close()
        for item in s:  # events, completions, rejections and summaries
            if isinstance(item, bc.pb.Completion):
                print(item.id, item.text)
