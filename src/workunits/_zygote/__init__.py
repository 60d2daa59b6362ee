"""The zygote: a small single-threaded process that forks every unit process.

``server`` runs in the zygote (it imports only the unit runtime); ``client``
and ``reaper`` run in the supervisor and talk to it over the control socket.
"""
