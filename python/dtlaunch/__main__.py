from dtlaunch import main

main()
