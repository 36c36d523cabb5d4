"""The MPI and ctypes set-up that the ncclabi GPU tests share (ncclabi_rank_local.py,
ncclabi_group_streams.py): every rank on GPU 0, NCCL's calls through ctypes to the process's symbols
(the preloaded libyali-nccl's first), one communicator of every MPI rank, its unique id broadcast by
MPI."""
import ctypes

import torch
from mpi4py import MPI


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def new_comm(nccl, world):
    """A new NCCL communicator of every MPI rank: a unique id made by rank 0, broadcast by MPI."""
    rank, n = world.Get_rank(), world.Get_size()
    uid = UniqueId()
    if rank == 0:
        assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
    raw = world.bcast(bytes(uid.internal) if rank == 0 else None, root=0)
    ctypes.memmove(ctypes.byref(uid), raw, 128)
    comm = ctypes.c_void_p()
    r = nccl.ncclCommInitRank(ctypes.byref(comm), n, uid, rank)
    assert r == 0, f"ncclCommInitRank returned {r}"
    return comm


def world_comm():
    """(nccl, comm, world, rank, n): the library handle, an NCCL communicator of every MPI rank (on
    GPU 0), MPI's world, this rank and the world size."""
    world = MPI.COMM_WORLD
    torch.cuda.set_device(0)
    nccl = ctypes.CDLL(None)  # the process's symbols: the preloaded library's first
    return nccl, new_comm(nccl, world), world, world.Get_rank(), world.Get_size()
