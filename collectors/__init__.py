"""Reading the outside world into evidence. Collectors read; they never decide and never write."""
