from swerl.cli import main

main()
