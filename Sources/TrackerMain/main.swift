import TrackerServer

await TrackerCommand.main()
