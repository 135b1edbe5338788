from errmap.commands.cli import run

run()
