"""What this device is (probe), what to prefer on it (profile), and the numbers one loader uses (plan)."""

from .plan import Plan, Threads, plan_for
from .probe import Platform, probe
from .profile import Profile, load_profile

__all__ = ["Plan", "Platform", "Profile", "Threads", "load_profile", "plan_for", "probe"]
