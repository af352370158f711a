from code_runner.cli.main import main

main()
