from perfbisect.cli.main import run

run()
