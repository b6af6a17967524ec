"""The pure core of longhaul: the Task aggregate, its events, the A2A state machine and skills.

Nothing in this package performs I/O, reads a clock or reads the environment. Time always comes
in as an argument so that tests can move it by a day.
"""
