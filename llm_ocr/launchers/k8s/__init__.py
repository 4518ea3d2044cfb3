"""Kubernetes' room: its adapter (:mod:`.adapter`: the cluster's API through the official client,
one Indexed Job per launch, the wheel in ConfigMaps, pods' logs), its manifest (:mod:`.manifest`:
the Job and ConfigMaps, and the checks of what goes into them) and its Job's and pods' states
(:mod:`.state`). It imports the launchers' core, never another platform's room."""
