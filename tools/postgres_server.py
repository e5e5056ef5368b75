"""Start (or find running) a local PostgreSQL server for a shared sweep or cross-validation study, and
print its URL; or stop it. The server is pgserver's (the 'postgres' extra: PostgreSQL's own binaries from
PyPI, no system package; as root it runs them as a system user 'pgserver' it creates).

    python tools/postgres_server.py start [--data DIR] [--database NAME]   # prints the study's URL
    python tools/postgres_server.py stop [--data DIR]

It listens on a Unix socket in DIR only: for workers on this machine (several `--workers 1` commands,
or a rehearsal of a multi-machine run). Machines sharing a study need a server they all reach, a managed
PostgreSQL or MySQL, whose URL every worker passes as --storage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--data", default="outputs/postgres", help="the server's data directory")
    parser.add_argument("--database", default="studies", help="the database to create for the studies")
    args = parser.parse_args(argv)
    try:
        import pgserver
    except ImportError:
        print("error: pgserver is not installed: pip install -e '.[postgres]'", file=sys.stderr)
        return 2
    data = Path(args.data).resolve()
    data.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(data, cleanup_mode=None if args.action == "start" else "stop")
    if args.action == "stop":
        server.cleanup()
        print(f"stopped the PostgreSQL server of {data}")
        return 0
    if args.database not in server.psql("SELECT datname FROM pg_database;"):
        server.psql(f'CREATE DATABASE "{args.database}";')
    print(server.get_uri(args.database))
    return 0


if __name__ == "__main__":
    sys.exit(main())
