from errmap.cli import run

run()
