"""Slurm's room: its adapter (:mod:`.adapter`: ``sbatch`` of one job array on a shared file
system, ``scancel``, logs from the task's file), its batch script (:mod:`.script`) and its tasks'
states from ``squeue`` and the script's task records (:mod:`.state`). It imports the launchers'
core, never another platform's room."""
