import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
def t(fn, n=20):
    for _ in range(3): fn()
    torch.cuda.synchronize(); s=torch.cuda.Event(enable_timing=True); e=torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n): fn()
    e.record(); torch.cuda.synchronize(); return s.elapsed_time(e)/n*1000
B,L=8,1024
q=torch.randn(B,32,L,128,device='cuda',dtype=torch.bfloat16); k=torch.randn(B,8,L,128,device='cuda',dtype=torch.bfloat16); v=torch.randn_like(k)
fl=4*B*32*128*L*(L+1)/2
for name,be in (("flash",SDPBackend.FLASH_ATTENTION),("cudnn",SDPBackend.CUDNN_ATTENTION)):
    try:
        with sdpa_kernel(be): us=t(lambda: F.scaled_dot_product_attention(q,k,v,is_causal=True,enable_gqa=True))
        print(name,"gqa",round(us,1),"us",round(fl/us/1e6),"TFLOP/s")
    except Exception as x: print(name,"gqa fails:",str(x)[:200])
kx,vx=k.repeat_interleave(4,1),v.repeat_interleave(4,1)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    us=t(lambda: F.scaled_dot_product_attention(q,kx,vx,is_causal=True)); print("cudnn expanded",round(us,1))
    us2=t(lambda: F.scaled_dot_product_attention(q,k.repeat_interleave(4,1),v.repeat_interleave(4,1),is_causal=True)); print("cudnn expand+attn",round(us2,1))
# jagged (varlen) through nested tensors
try:
    lens=[1024,512,1536,1024]
    qs=[torch.randn(32,n,128,device='cuda',dtype=torch.bfloat16) for n in lens]
    ks=[torch.randn(32,n,128,device='cuda',dtype=torch.bfloat16) for n in lens]
    nq=torch.nested.nested_tensor([x.transpose(0,1) for x in qs],layout=torch.jagged).transpose(1,2)
    nk=torch.nested.nested_tensor([x.transpose(0,1) for x in ks],layout=torch.jagged).transpose(1,2)
    for name,be in (("flash",SDPBackend.FLASH_ATTENTION),("cudnn",SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(be): us=t(lambda: F.scaled_dot_product_attention(nq,nk,nk,is_causal=True)); print(name,"jagged",round(us,1))
        except Exception as x: print(name,"jagged fails:",str(x)[:200])
except Exception as x: print("nested fails",str(x)[:200])
print(torch.__version__, torch.backends.cudnn.version())
