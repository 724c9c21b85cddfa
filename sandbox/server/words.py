"""The words generated tasks draw their file names and texts from (desktop tasks, the office suite)."""

WORDS = (
    "apple",
    "river",
    "stone",
    "cloud",
    "maple",
    "ember",
    "delta",
    "lunar",
    "cedar",
    "orbit",
    "pixel",
    "amber",
    "coral",
    "frost",
    "harbor",
    "island",
    "jungle",
    "lemon",
    "meadow",
    "nectar",
)
