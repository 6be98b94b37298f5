#!/bin/bash
#SBATCH -N 1
# answer runtime_seconds=0 confidence=1.0 reason=instant
srun hostname
