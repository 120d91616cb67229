"""The top wing: its rows and rates on a real server, its screen."""
