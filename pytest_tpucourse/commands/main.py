"""The `tpucourse` command: the learner's loop, the roofline playground and the BlockSpec sandbox in a terminal, the bench page.

    tpucourse roofline --chip v5e --op matmul --shape 4096x4096x4096 --dtype bfloat16
    tpucourse roofline --chip v5e --plot roofline.png      # needs the `plot` extra
    tpucourse mesh --chip v5e --topology 4x4 --op all-gather --bytes 1GiB   # a collective, hop by hop
    tpucourse bench                                        # bench/records.jsonl -> bench/README.md
    tpucourse records check [--repair]                     # bad lines and rejected rows, path:line
    tpucourse records link https://github.com/...          # gate 05's upstream link, self-reported
    tpucourse blockspec --shape 1000x384 --block 128x128 --dtype bfloat16   # the BlockSpec sandbox
    tpucourse timeline exchange-deadlock --devices 4       # a schedule's semaphore timeline
    tpucourse progress | hint ch11.matmul | solution ch11.matmul | reset ch11.matmul | watch ch11
    tpucourse confirm ch11                                 # done exercises checked outside your run's process
    tpucourse tick ch15 3                                                    # a self-test item, your word
    tpucourse xray model.py:loss --shapes 8x128 128x10:bfloat16 [--html xray.html] [--chip v5e]   # the IR x-ray
    tpucourse site [--out DIR] [--serve [--port N]]        # the course site: stack, chapters, bench, instruments
    tpucourse compile exercises/ch11/matmul.py:matmul --chip v5e --shape 1024x1024,1024x1024 \\
        --dtype bfloat16 --kw bm=256       # the real TPU compiler's verdict (the tpu-compile extra)
    tpucourse grade trees/* --chapters ch01,ch11 --jobs 2 [--shard K/N] --out gradebook.json   # a class

Each subcommand is one module of this folder with two functions: `add_parser(subcommands)`
adds its parser and returns it, `run(args)` does the work and returns the exit status. What
a subcommand runs that loads JAX or the compiler is imported inside its `run`, so `tpucourse
--help` loads neither. A refusal (ValueError, or RequestError: what the learner named cannot
be done) ends as one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..learner.requests import RequestError
from . import (bench, blockspec, compile, confirm, grade, hint, mesh, new_chapter, progress, records, reset, roofline,
               shipped, site, solution, tick, timeline, watch, xray)

# In the order `tpucourse --help` lists them; a module with LISTED = False (an author's tool) runs
# but is left out of that list.
COMMANDS = (roofline, bench, records, mesh, blockspec, progress, confirm, hint, tick, solution, reset, watch, xray,
            timeline, compile, site, grade, new_chapter, shipped)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tpucourse", description=__doc__.splitlines()[0])
    subcommands = parser.add_subparsers(dest="command", required=True)
    listed = []
    for command in COMMANDS:
        subparser = command.add_parser(subcommands)
        subparser.set_defaults(run=command.run)
        if getattr(command, "LISTED", True):
            listed.append(subparser.prog.split()[-1])
    subcommands.metavar = "{" + ",".join(listed) + "}"
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, RequestError) as error:
        print(f"tpucourse {args.command}: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`tpucourse mesh ... | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0


if __name__ == "__main__":
    sys.exit(main())
