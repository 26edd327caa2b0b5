from retasc.cli.main import main

main()
