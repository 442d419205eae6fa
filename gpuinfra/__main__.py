from gpuinfra.cli import main

main()
